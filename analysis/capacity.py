"""The capacity section of the report (pure): what ``capacity.csv`` and ``fleet.csv`` (``sweeps/capacity.py``) say,
as tables and one sentence per GPU type (and one per arm whose capacity a failed or hung trial bounds, or whose
states were not monotone in load), and every done cell against the sweep's SLO (``--slo``)."""

from __future__ import annotations

import pandas as pd

from orchestrator.records.cell import CellStatus


def _named(frame: pd.DataFrame, routed: bool = False) -> pd.DataFrame:
    """``frame`` with each arm's name: the policy, with its DRAM budget where the policy was searched at several,
    and with ``routed`` (capacity rows), its replicas and router where it has them."""
    several = frame.groupby(["gpu", "policy"]).dram_gb.transform("nunique") > 1
    names = []
    for row, budgets in zip(frame.itertuples(), several):
        name = f"{row.policy} ({row.dram_gb:g} GiB)" if budgets else row.policy
        if routed and isinstance(getattr(row, "router", None), str):
            name += f" x{int(row.replicas)} {row.router}"
        names.append(name)
    return frame.assign(arm=names)


def _measured_or_simulated(row) -> str:
    if isinstance(getattr(row, "vllm_at_capacity", None), str):
        return "simulated, then measured"
    return "measured" if row.engine == "vllm" else "simulated"


def capacity_table(capacity: pd.DataFrame) -> pd.DataFrame:
    """Per GPU type and arm: its capacity with the load above it that was not met and how (missed, unsure, failed or
    hung), the loads met above that one, its goodput and cost at capacity, and how it was found (simulated, measured,
    or simulated then measured)."""
    frame = _named(capacity, routed=True)
    frame = frame.assign(found=[_measured_or_simulated(row) for row in frame.itertuples()])
    columns = ["gpu", "arm", "tp", "replicas", "gpus", "capacity_jps", "first_unmet_jps", "at_first_unmet",
               "non_monotone_jps", "too_few_jobs_jps", "goodput_jps", "goodput_lo_jps", "goodput_hi_jps", "cost_per_1k_jobs", "found",
               "vllm_at_capacity", "above_jps", "vllm_at_above", "vllm_capacity_jps", "vllm_first_unmet_jps",
               "vllm_at_first_unmet", "vllm_non_monotone_jps", "vllm_measured_above_jps",
               "vllm_at_measured_above"]  # fmt: skip
    return frame[[column for column in columns if column in frame]]


def fleet_table(fleet: pd.DataFrame) -> pd.DataFrame:
    columns = ["gpu", "arm", "router", "target_jps", "capacity_jps", "first_guess", "replicas", "gpus",
               "cost_per_1k_jobs", "checked"]  # fmt: skip
    frame = _named(fleet)
    return frame[[column for column in columns if column in frame]]


def sentences(capacity: pd.DataFrame, fleet: pd.DataFrame | None) -> list[str]:
    """One sentence per GPU type: with a fleet, the GPUs each arm needs for the traffic (its best router); without,
    the capacity per GPU of the best arm against the worst. Then one per arm whose capacity is bounded by a trial that
    failed or hung, or that met the SLO again above a load it did not (``_caveats``)."""
    said = []
    slo = capacity.slo.iloc[0]
    for gpu, arms in _named(capacity, routed=True).groupby("gpu", sort=False):
        if fleet is not None and len(fleet[fleet.gpu == gpu]):
            said.append(_fleet_sentence(gpu, _named(fleet[fleet.gpu == gpu]), slo))
        else:
            said.append(_capacity_sentence(gpu, arms, slo))
        said += _caveats(gpu, arms)
    return said


def _capacity_sentence(gpu: str, arms: pd.DataFrame, slo: str) -> str:
    known = arms.dropna(subset=["capacity_jps"])
    known = known.assign(per_gpu=known.capacity_jps / known.gpus)  # a routed arm's capacity is its replicas' together
    known = known.sort_values("per_gpu", ascending=False)
    if not len(known):
        return f"On {gpu}, no policy meets {slo} at the lowest load searched."
    best, worst = known.iloc[0], known.iloc[-1]
    if len(known) == 1 or best.per_gpu == worst.per_gpu:
        return (f"On {gpu} at {slo}, {', '.join(known.arm)} carr{'y' if len(known) > 1 else 'ies'} "
                f"{best.per_gpu:.3g} JPS per GPU.")  # fmt: skip
    gain = (best.per_gpu / worst.per_gpu - 1) * 100
    return (f"On {gpu} at {slo}, {best.arm} carries {best.per_gpu:.3g} JPS per GPU where {worst.arm} carries "
            f"{worst.per_gpu:.3g} (+{gain:.0f}%).")  # fmt: skip


def _caveats(gpu: str, arms: pd.DataFrame) -> list[str]:
    """What a reader must know of an arm's capacity beyond its number: a trial failed or hung at the first load not
    met (a load not met for want of records, not a slow one), and loads met above it (the capacity assumes meeting
    the SLO is monotone in load; there it was not)."""
    said = []
    for row in arms.itertuples():
        state = getattr(row, "at_first_unmet", None)
        if state in ("failed", "hung"):
            said.append(f"On {gpu}, a trial of {row.arm} {state} at {row.first_unmet_jps:g} JPS, counted as not met.")
        again = getattr(row, "non_monotone_jps", None)
        if isinstance(again, str) or (again is not None and pd.notna(again)):
            loads = again if isinstance(again, str) else f"{again:g}"  # one load reads back from the CSV as a number
            said.append(f"On {gpu}, {row.arm} met the SLO again at {loads} JPS, above {row.first_unmet_jps:g} where it "
                        "did not: not monotone in load, as its capacity assumes.")  # fmt: skip
    return said


def _fleet_sentence(gpu: str, fleet: pd.DataFrame, slo: str) -> str:
    sized = fleet.dropna(subset=["gpus"]).sort_values("gpus").drop_duplicates("arm")  # each arm's best router
    target = fleet.target_jps.iloc[0]
    if not len(sized):
        return f"On {gpu}, no fleet checked meets {slo} at {target:g} JPS."
    needs = [f"{row.arm} needs {int(row.gpus)} {gpu}{'s' if row.gpus != 1 else ''} ({row.router})"
             for row in sized.itertuples()]  # fmt: skip
    return f"For {target:g} JPS at {slo}, " + ", ".join(needs[:-1]) + (" where " if len(needs) > 1 else "") + needs[-1] + "."


def cheapest(capacity: pd.DataFrame, fleet: pd.DataFrame | None) -> str | None:
    """The cheapest (GPU type, arm) per thousand jobs: for the target traffic where a fleet was sized, else at
    capacity; None without prices."""
    frame = fleet if fleet is not None and "cost_per_1k_jobs" in fleet else capacity
    if "cost_per_1k_jobs" not in frame or frame.cost_per_1k_jobs.isna().all():
        return None
    row = next(_named(frame).sort_values("cost_per_1k_jobs").itertuples())
    where = f"for {row.target_jps:g} JPS ({int(row.gpus)} GPUs, {row.router})" if frame is fleet else "at capacity"
    return f"Cheapest {where}: {row.arm} on {row.gpu}, {row.cost_per_1k_jobs:.3g} per thousand jobs."


def slo_per_cell(summary: pd.DataFrame) -> pd.DataFrame:
    """Every done cell judged against an SLO: met, missed or unsure at 95%, and its goodput with its interval."""
    if "slo_met" not in summary:
        return pd.DataFrame()
    judged = summary[(summary.status == CellStatus.DONE.value) & summary.slo_met.notna()]
    columns = ["gpu", "policy", "dram_gb", "replicas", "router", "jps", "engine", "slo", "slo_met", "slo_targets", "goodput_jps",
               "goodput_lo_jps", "goodput_hi_jps", "jct_p90_s"]  # fmt: skip
    return judged[[column for column in columns if column in judged]].sort_values(["gpu", "policy", "dram_gb", "jps"])
