"""Which policy wins, per (GPU, DRAM budget, load, engine), and only when it wins beyond the uncertainty
(pure functions of frames; no I/O).

Job times. A job that timed out or failed has no completion time, but it has a lower bound: it ran at
least from its arrival to the moment it was cut. It is kept in every comparison at that censored value,
so a policy that times jobs out is never flattered by averaging only the jobs it finished; the mean
over censored values (a lower bound on the true mean) is what is compared, with the completion rate
beside it, and a policy that completed fewer jobs than a rival beyond the uncertainty is never named the
winner.

Intervals (95%). Every policy of a comparison sees the identical schedule (the seed fixes arrivals and
tool texts), so policies are compared job by job on the same jobs, which removes the spread between jobs
from the comparison. With one trial the interval comes from resampling the jobs (a paired percentile
bootstrap): it shows how much the verdict depends on which jobs arrived, and it cannot show run-to-run
spread, which the report says. With several trials (seeds) the trial is the unit: the statistic is
computed per trial and a Student-t interval is put around its mean over trials, which captures
run-to-run spread (in the source study the same policy on the same GPU differed by up to 17% between two
runs).

A winner must beat every rival by at least ``MIN_EFFECT_PCT`` at the interval's lower end; otherwise the
verdict is a tie naming the tied policies, or, where a rival is faster than the leader beyond the uncertainty
but lost jobs the leader completed, a trade-off naming the faster policy and the jobs it lost (the verdict a
mean over censored times would otherwise hide as a tie with a large negative margin). Simulated cells carry
the simulator's own error (``sim/sim_error.toml``): a simulated margin that does not clear the combined error
of the two policies and of the GPU's roofline is "too close to call in simulation", and the verdict names the
cells whose measurement would settle it. The verdict is one typed value, ``records.verdict.Verdict``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from orchestrator.records.arm import arm_name, shape_name
from orchestrator.records.cell import CellStatus
from orchestrator.records.intervals import Interval, censored_times, interval, margin_pct, mean_time
from orchestrator.records.regime import KvRegime, regime_of_row
from orchestrator.records.schema import JobStatus
from orchestrator.records.verdict import MIN_EFFECT_PCT, TOO_CLOSE, Verdict, VerdictKind, changes
from orchestrator.sim.error_bands import SimErrors

GROUP = ["gpu", "dram_gb", "jps", "engine", "replicas"]


@dataclass(frozen=True)
class CellRecords:
    """What the verdicts read of one done cell: its jobs (``censored_job_times``) and its request rows."""

    jobs: pd.DataFrame
    requests: pd.DataFrame


def routed_arms(summary: pd.DataFrame) -> pd.DataFrame:
    """A cell of several replicas compares as its policy with its router ("continuum @ session-affinity"), so every
    table, figure and verdict answers which policy with which router; cells compare only at one replica count (a
    summary written before replicas existed has one per cell). ``kv_policy`` keeps the policy alone."""
    kv_policy = summary.kv_policy if "kv_policy" in summary else summary.policy
    summary = summary.assign(kv_policy=kv_policy, replicas=summary.get("replicas", 1))
    summary["replicas"] = summary.replicas.fillna(1).astype(int)
    if "router" in summary:
        routed = summary.router.notna()
        summary.loc[routed, "policy"] = [arm_name(policy, router)
                                         for policy, router in zip(kv_policy[routed], summary.router[routed])]  # fmt: skip
    return summary


def replica_shapes(summary: pd.DataFrame) -> pd.DataFrame:
    """A tensor-parallel cell compares with the cells of its own degree: its GPU reads "H100 TP4", so every table,
    figure and verdict of the report is per degree (a simulated verdict on such a shape carries the largest GPU error
    band, as for a GPU type the public figures do not check). ``gpu_type`` keeps the type alone."""
    gpu_type = summary.gpu_type if "gpu_type" in summary else summary.gpu
    summary = summary.assign(gpu_type=gpu_type, tp=summary.get("tp", 1))
    summary["tp"] = summary.tp.fillna(1).astype(int)
    parallel = summary.tp > 1
    summary.loc[parallel, "gpu"] = [shape_name(gpu, tp) for gpu, tp in zip(gpu_type[parallel], summary.tp[parallel])]
    return summary


def censored_job_times(jobs: pd.DataFrame) -> pd.DataFrame:
    """Per job (by ``job_index``): its time in seconds, completed or censored where it was cut
    (``records.intervals.censored_times``), and whether it completed."""
    spans = censored_times(jobs.arrival_at.to_numpy(), jobs.finished_at.to_numpy(dtype=float))
    completed = jobs.status == JobStatus.COMPLETED.value
    return pd.DataFrame({"job_index": jobs.job_index, "time_s": spans, "completed": completed}).set_index("job_index")


def completion_gap_pct(leader: np.ndarray, rival: np.ndarray) -> np.ndarray:
    """The leader's completion rate minus the rival's, in percentage points."""
    return (leader.mean(axis=-1) - rival.mean(axis=-1)) * 100


@dataclass(frozen=True)
class PolicyRuns:
    """One policy's jobs in one comparison: per trial (seed, in the comparison's order), job times and
    completion flags aligned on the same jobs as every other policy's."""

    policy: str
    times: list[np.ndarray]
    completed: list[np.ndarray]


def policy_runs(cells: pd.DataFrame, records_of: Callable[[str], CellRecords]) -> list[PolicyRuns]:
    """The policies of one comparison's done cells, on the seeds every policy has and the jobs every
    policy's cell of a seed has."""
    seeds = sorted(set.intersection(*(set(group.seed) for _, group in cells.groupby("policy"))))
    frames = {(row.policy, row.seed): records_of(row.cell_key).jobs for row in cells.itertuples() if row.seed in seeds}
    runs = []
    for policy in dict.fromkeys(cells.policy):
        times, completed = [], []
        for seed in seeds:
            common = sorted(set.intersection(*(set(frames[(p, seed)].index) for p in dict.fromkeys(cells.policy))))
            frame = frames[(policy, seed)].loc[common]
            times.append(frame.time_s.to_numpy(dtype=float))
            completed.append(frame.completed.to_numpy(dtype=float))
        runs.append(PolicyRuns(policy, times, completed))
    return runs


def policy_stats(runs: PolicyRuns) -> dict:
    """Mean job time (censored) with its interval, its tail, and the completion rate, of one policy."""
    jct = interval([(t,) for t in runs.times], mean_time)
    pooled = np.concatenate(runs.times)
    p50, p90, p99 = np.percentile(pooled, [50, 90, 99])
    completion = float(np.mean([c.mean() for c in runs.completed])) * 100
    return {"policy": runs.policy, "jct_mean_s": jct.estimate, "jct_lo_s": jct.lo, "jct_hi_s": jct.hi,
            "jct_p50_s": p50, "jct_p90_s": p90, "jct_p99_s": p99, "completion_pct": completion}  # fmt: skip


def request_tails(requests: pd.DataFrame) -> dict:
    """TTFT p99 and worst over a policy's requests, a request that never saw a first token counted at the
    time it was cut (its TTFT is at least that), and each turn's mean and p90 latency."""
    ttft = requests.ttft_s.fillna(requests.latency_s).dropna()
    tails = {"ttft_p99_s": float(np.percentile(ttft, 99)) if len(ttft) else np.nan,
             "ttft_max_s": float(ttft.max()) if len(ttft) else np.nan}  # fmt: skip
    for turn, latency in requests.groupby("turn").latency_s:
        tails[f"T{turn} mean"] = float(latency.mean())
        tails[f"T{turn} p90"] = float(latency.quantile(0.9))
    return tails


def verdict(where: Mapping, runs: list[PolicyRuns], sim_error: SimErrors | None = None) -> Verdict:
    """The verdict of one comparison (``where``: its gpu, dram_gb, jps and engine). ``sim_error`` is given for
    simulated cells: a margin must then also clear the two policies' and the GPU's errors combined."""
    num_trials = len(runs[0].times) if runs else 0
    if len(runs) < 2 or num_trials == 0:
        return Verdict(**where, kind=VerdictKind.UNDECIDED, leader=None, tied_with=(), margin_pct=np.nan,
                       margin_lo_pct=np.nan, margin_hi_pct=np.nan, num_trials=num_trials,
                       note="fewer than two policies done")  # fmt: skip
    by_mean = sorted(runs, key=_mean_time)
    completion = {}
    for index, a in enumerate(runs):
        for b in runs[index + 1:]:
            gap = _completion_gap(a, b)  # b's gap over a is its mirror image: same resamples, negated
            completion[(a.policy, b.policy)] = gap
            completion[(b.policy, a.policy)] = Interval(-gap.estimate, -gap.hi, -gap.lo)
    # The leader: the fastest policy that no rival out-completes beyond the uncertainty.
    leader = next((r for r in by_mean if not any(completion[(r.policy, o.policy)].hi < 0 for o in runs if o is not r)),
                  by_mean[0])  # fmt: skip
    rivals = [r for r in by_mean if r is not leader]
    margins = {r.policy: interval(list(zip(leader.times, r.times)), margin_pct) for r in rivals}
    bands = {r.policy: sim_error.band_pct(where["gpu"], leader.policy, r.policy) if sim_error is not None else 0.0
             for r in rivals}
    # Faster than the leader beyond the uncertainty: then it lost jobs the leader completed (or it would lead).
    faster = [r for r in rivals if margins[r.policy].hi < -max(bands[r.policy], MIN_EFFECT_PCT)]
    faster_names = {r.policy for r in faster}
    slower = [p for p in margins if p not in faster_names]
    tied = [p for p in slower if margins[p].lo <= max(bands[p], MIN_EFFECT_PCT)]
    out_completed = [p for p in margins if completion[(leader.policy, p)].hi < 0]
    closest = min(margins, key=lambda p: margins[p].estimate)
    kind = (VerdictKind.TRADE_OFF if faster else VerdictKind.TIE if tied or out_completed else VerdictKind.WIN)
    note = "" if num_trials > 1 else "one trial: intervals over jobs, no run-to-run spread"
    within_sim_error = sim_error is not None and any(MIN_EFFECT_PCT < margins[p].lo <= bands[p] for p in tied)
    if within_sim_error:
        settle = ", ".join(sorted({leader.policy, *tied}))
        note = f"{TOO_CLOSE} (within the simulator's error); measure {settle} to settle it"
    lossy = {"faster": faster[0].policy, "jobs_lost": sum(int((1 - c).sum()) for c in faster[0].completed),
             "num_jobs": sum(len(c) for c in faster[0].completed),
             "faster_by_pct": (1 - _mean_time(faster[0]) / _mean_time(leader)) * 100} if faster else {}  # fmt: skip
    return Verdict(**where, kind=kind, leader=leader.policy,
                   tied_with=tuple(sorted({leader.policy, *tied})) if tied else (),
                   margin_pct=margins[closest].estimate, margin_lo_pct=margins[closest].lo,
                   margin_hi_pct=margins[closest].hi, num_trials=num_trials, note=note,
                   within_sim_error=within_sim_error, **lossy)  # fmt: skip


def _mean_time(runs: PolicyRuns) -> float:
    return float(np.mean([times.mean() for times in runs.times]))


def _completion_gap(leader: PolicyRuns, rival: PolicyRuns) -> Interval:
    """The leader's completion rate minus the rival's, with its interval (exactly 0 when both completed
    every job, the usual case, without resampling)."""
    if all(flags.all() for flags in leader.completed + rival.completed):
        return Interval(0.0, 0.0, 0.0)
    return interval(list(zip(leader.completed, rival.completed)), completion_gap_pct)


def verdicts(summary: pd.DataFrame, records_of: Callable[[str], CellRecords],
             sim_error: SimErrors) -> tuple[list[Verdict], pd.DataFrame]:  # fmt: skip
    """One verdict per comparison, and per policy of each comparison the statistics behind it with its tails,
    timeouts, errors and preemptions, from the done rows of ``summary``."""
    done = replica_shapes(routed_arms(summary[summary.status == CellStatus.DONE.value]))
    # A policy behind a router keeps its policy's error band: the simulator's routing is not yet checked on its own.
    policies = sim_error.policies
    sim_error = replace(sim_error, policies=dict(policies) | {
        arm: policies[kv_policy] for arm, kv_policy in zip(done.policy, done.kv_policy) if kv_policy in policies})
    found, policy_rows = [], []
    for key, cells in done.groupby(GROUP, sort=True):
        where = dict(zip(GROUP, key))
        runs = policy_runs(cells, records_of)
        regimes = {run.policy: cell_regimes(cells[cells.policy == run.policy]) for run in runs}
        found.append(replace(verdict(where, runs, sim_error if where["engine"] == "sim" else None),
                             kv_regimes="; ".join(f"{policy}: {regime}" for policy, regime in regimes.items() if regime)))
        for run in runs:
            of_policy = cells[cells.policy == run.policy]
            requests = pd.concat([records_of(cell_key).requests for cell_key in of_policy.cell_key])
            counts = {name: of_policy[name].sum(min_count=1) if name in of_policy else np.nan
                      for name in ("num_timeouts", "num_errors", "num_preemptions")}  # fmt: skip
            policy_rows.append(where | {"num_trials": len(run.times)} | policy_stats(run) | counts
                               | request_tails(requests) | {"kv_regime": regimes[run.policy]})  # fmt: skip
    return found, pd.DataFrame(policy_rows)


def cell_regimes(cells: pd.DataFrame) -> str:
    """The KV regime the cells (one policy's trials) measured, in words (``records.regime``): one regime with its
    evidence, or how many trials measured pressure where they differ; empty where none has a measured regime."""
    measured = [regime for regime in (regime_of_row(row) for row in cells.to_dict("records")) if regime is not None]
    if not measured:
        return ""
    if len({regime.regime for regime in measured}) == 1:
        return measured[0].in_words() if len(measured) == 1 else measured[0].regime.value
    pressed = sum(regime.regime is KvRegime.PRESSURE for regime in measured)
    return f"pressure in {pressed} of {len(measured)} trials"


def flips(found: list[Verdict]) -> pd.DataFrame:
    """Where the verdict changes between adjacent loads of one GPU, DRAM budget, engine and replica count: the loads
    that bracket each change, and the verdict on either side."""
    rows = [{"gpu": below.gpu, "dram_gb": below.dram_gb, "engine": below.engine, "replicas": below.replicas,
             "jps_below": below.jps, "jps_above": above.jps, "below": below.label, "above": above.label}
            for below, above in changes(found)]  # fmt: skip
    return pd.DataFrame(rows, columns=["gpu", "dram_gb", "engine", "replicas", "jps_below", "jps_above", "below",
                                       "above"])
