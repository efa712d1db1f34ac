"""The report's tables, computed from the parquet (pure functions of frames; no I/O).

Missing cells stay missing (NaN, never 0): a table only averages what is done, and ``missing_cells``
says which cells are absent from it and why.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from orchestrator.cell.spec import CellSpec
from orchestrator.gpus import GPU_TYPES
from orchestrator.models.arch import load_model
from orchestrator.records.cell import CellStatus
from orchestrator.records.schema import RequestStatus
from orchestrator.sizing.kv import retention_time_s
from orchestrator.units import GIB


def _grid_index(cells: pd.DataFrame) -> list[str]:
    """Rows are load levels, and DRAM budgets too where a GPU was swept over several."""
    return ["dram_gb", "jps"] if cells.dram_gb.nunique() > 1 else ["jps"]


def jct_table(summary: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """Mean JCT (s) per policy per load on ``gpu`` (mean over seeds), the winner of each row and its
    advantage: how much lower its JCT is than the best other policy's, in percent."""
    cells = summary[summary.gpu == gpu]
    index = _grid_index(cells)
    done = cells[cells.status == CellStatus.DONE.value]
    table = done.pivot_table(index=index, columns="policy", values="jct_mean_s", aggfunc="mean")
    rows = cells[index].drop_duplicates().sort_values(index)
    table = table.reindex(pd.MultiIndex.from_frame(rows) if len(index) > 1 else rows[index[0]])
    table = table.reindex(columns=[p for p in dict.fromkeys(cells.policy)])
    winners, advantages = [], []
    for _, row in table.iterrows():
        measured = row.dropna().sort_values()
        if len(measured) >= 2:
            winners.append(measured.index[0])
            advantages.append((measured.iloc[1] - measured.iloc[0]) / measured.iloc[1] * 100)
        else:
            winners.append(None)
            advantages.append(np.nan)
    table["winner"] = winners
    table["advantage_pct"] = advantages
    table.columns.name = None
    return table.reset_index()


def cross_gpu_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """Per GPU and policy: the loads where the policy wins, and its peak advantage and where."""
    rows = []
    for gpu in sorted(summary.gpu.unique()):
        table = jct_table(summary, gpu)
        contested = table[table.winner.notna()]
        for policy in summary[summary.gpu == gpu].policy.unique():
            won = contested[contested.winner == policy]
            peak = won.loc[won.advantage_pct.idxmax()] if len(won) else None
            rows.append(
                {
                    "gpu": gpu,
                    "policy": policy,
                    "wins": len(won),
                    "contested_loads": len(contested),
                    "jps_won": ", ".join(f"{jps:g}" for jps in won.jps),
                    "peak_advantage_pct": peak.advantage_pct if peak is not None else np.nan,
                    "peak_at_jps": peak.jps if peak is not None else np.nan,
                }
            )
    return pd.DataFrame(rows)


def _per_turn(summary: pd.DataFrame, turns: pd.DataFrame, gpu: str, value: str) -> pd.DataFrame:
    cells = summary[(summary.gpu == gpu) & (summary.status == CellStatus.DONE.value)]
    merged = turns.merge(cells[["cell_key", "policy", "dram_gb", "jps", "seed"]], on="cell_key")
    index = ["policy", *_grid_index(summary[summary.gpu == gpu])]
    table = merged.pivot_table(index=index, columns="turn", values=value, aggfunc="mean")
    table.columns = [f"T{turn}" for turn in table.columns]
    return table


def per_turn_latency(summary: pd.DataFrame, turns: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """Mean latency (s) of each turn per policy and load, and each job's last turn over its first (T-last/T1).
    Where jobs have different numbers of turns, each turn's request count follows (``n_T<k>``): a late turn
    of few jobs is a small sample."""
    table = _per_turn(summary, turns, gpu, "latency_mean_s")
    if len(table.columns):
        cells = summary[(summary.gpu == gpu) & (summary.status == CellStatus.DONE.value)]
        table["T-last/T1"] = cells.groupby(table.index.names).t_last_over_t1.mean()
        counts = _per_turn(summary, turns, gpu, "num_requests")
        if counts.nunique(axis=1).gt(1).any():  # the turn counts differ: jobs of variable length
            table = table.join(counts.add_prefix("n_"))
    return table.reset_index()


def cached_per_turn(summary: pd.DataFrame, turns: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """Prefix-cache hit per turn (cached / prompt tokens) beside the theoretical best
    ((previous prompt + completion) / prompt), per policy and load."""
    cached = _per_turn(summary, turns, gpu, "cached_fraction").add_prefix("cached_")
    best = _per_turn(summary, turns, gpu, "best_cached_fraction").add_prefix("best_")
    return cached.join(best).reset_index()


def health(summary: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """Jobs, completions, timeouts, errors and the client's dispatch lag of every cell on ``gpu``."""
    columns = ["policy", "dram_gb", "jps", "seed", "status", "num_jobs", "num_completed", "num_timeouts", "num_errors",
               "dispatch_lag_p99_ms"]  # fmt: skip
    cells = summary[summary.gpu == gpu]
    return cells[[c for c in columns if c in cells.columns]].sort_values(["policy", "dram_gb", "jps"]).reset_index(drop=True)


CONTEXT_BUCKETS = (0, 1024, 2048, 4096, 8192, 16384, float("inf"))
CONTEXT_LABELS = ("<1K", "1-2K", "2-4K", "4-8K", "8-16K", "16K+")


def latency_by_context(summary: pd.DataFrame, requests_of, gpu: str) -> pd.DataFrame:
    """Latency and TTFT of the successful requests by prompt size (tokens: <1K, 1-2K, ... 16K+), per policy and
    load, seeds pooled; ``requests_of(cell_key)`` reads a cell's request records. Where prompts of very
    different sizes mix (variable turns, a trace), this tells a slow policy from a workload of long prompts."""
    cells = summary[(summary.gpu == gpu) & (summary.status == CellStatus.DONE.value)]
    index = ["policy", *_grid_index(summary[summary.gpu == gpu])]
    frames = []
    for cell in cells.itertuples():
        requests = requests_of(cell.cell_key)
        ok = requests[(requests.status == RequestStatus.OK.value) & requests.prompt_tokens.notna()].copy()
        for column in index:
            ok[column] = getattr(cell, column)
        frames.append(ok)
    if not frames:
        return pd.DataFrame()
    requests = pd.concat(frames, ignore_index=True)
    requests["context"] = pd.cut(requests.prompt_tokens, CONTEXT_BUCKETS, right=False, labels=CONTEXT_LABELS)
    grouped = requests.groupby([*index, "context"], observed=True)
    table = grouped.agg(
        n=("latency_s", "size"), latency_mean_s=("latency_s", "mean"),
        latency_p90_s=("latency_s", lambda latency: latency.quantile(0.9)), ttft_mean_s=("ttft_s", "mean"),
    )  # fmt: skip
    table["cached_fraction"] = grouped.cached_tokens.sum() / grouped.prompt_tokens.sum()
    return table.reset_index()


PIN_SHARES = ("pin_carried_pct", "pin_expired_pct", "pin_gave_way_pct", "pin_abandoned_pct")


def pin_outcomes(summary: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """What became of Continuum's pins per policy and load (``records/pins.py``), seeds averaged: the share
    carried to the job's next turn, expired before it came, given way to other work, or held for a job that
    never came back, and the KV held in vain (block-seconds). Empty where no cell pinned."""
    cells = summary[(summary.gpu == gpu) & (summary.status == CellStatus.DONE.value)]
    if "num_pins" not in cells or not (cells.num_pins.fillna(0) > 0).any():
        return pd.DataFrame()
    pinned = cells[cells.num_pins > 0]
    columns = ["num_pins", *PIN_SHARES, "pin_in_vain_block_s", "tool_time_s"]
    table = pinned.groupby(["policy", *_grid_index(cells)])[columns].mean()
    return table.reset_index()


def missing_cells(summary: pd.DataFrame) -> pd.DataFrame:
    """Cells of the grid without a result, and why (``pending``: the cluster had no GPU of the type)."""
    missing = summary[summary.status != CellStatus.DONE.value]
    reasons = {
        "pending": "no GPU of this type in the cluster yet",
        "not_run": "not run yet",
        "failed": "failed (see its MLflow run)",
        "hung": "engine stopped making progress",
        "interrupted": "sweep stopped while it ran",
    }
    frame = missing[["gpu", "policy", "dram_gb", "jps", "seed", "status"]].copy()
    frame["why"] = frame.status.map(reasons).fillna(frame.status)
    if "reason" in missing:  # the driver's own words where it gave some (e.g. the autoscaler's time-out)
        frame["why"] = missing["reason"].where(missing["reason"].notna(), frame["why"])
    return frame.sort_values(["gpu", "policy", "dram_gb", "jps"]).reset_index(drop=True)


def per_replica(requests: pd.DataFrame, trace: pd.DataFrame) -> pd.DataFrame:
    """One cell of several replicas, per replica: the requests it served (and how many failed), the turns after a
    job's first it served and how many of them came from another replica, the share of their best possible prefix
    they found cached, and Continuum's pins it made and let expire. Empty for a cell of one replica."""
    if "replica" not in requests or requests.replica.nunique() < 2:
        return pd.DataFrame()
    ordered = requests.sort_values(["job_id", "turn"])
    ordered = ordered.assign(moved_in=ordered.groupby("job_id").replica.shift().pipe(
        lambda previous: previous.notna() & (previous != ordered.replica)))  # fmt: skip
    rows = []
    for replica, served in ordered.groupby("replica"):
        later = served[(served.turn > 0) & (served.status == RequestStatus.OK.value)]
        best = later.best_cached_tokens.sum()
        events = trace[trace.replica == replica] if len(trace) and "replica" in trace else trace.iloc[0:0]
        finishes, unpins = (events[events.kind == kind] if len(events) else events for kind in ("finish", "unpin"))
        rows.append({
            "replica": replica, "requests": len(served), "failed": int((served.status != RequestStatus.OK.value).sum()),
            "later_turns": len(later), "moved_in": int(served.moved_in.sum()),
            "prefix_kept_pct": 100 * later.cached_tokens.sum() / best if best else np.nan,
            "pins": int((finishes.action == "pin").sum()) if len(finishes) else 0,
            "pins_expired": int((unpins.reason == "ttl").sum()) if len(unpins) else 0,
        })  # fmt: skip
    return pd.DataFrame(rows)


def kv_lifecycle(requests: pd.DataFrame, trace: pd.DataFrame, job_id: str) -> pd.DataFrame:
    """One job's KV across its turns: what each turn sent, what could have been cached (everything the
    previous turn sent and received), what was, the gap since the previous turn finished, the free
    blocks when it was admitted, and what happened to its blocks when it finished (pin or free)."""
    job = requests[requests.job_id == job_id].sort_values("turn")
    events = trace[trace.get("job_id", pd.Series(dtype=object)) == job_id] if len(trace) else trace
    admits = events[events.kind == "admit"].drop_duplicates("turn").set_index("turn") if len(events) else None
    finishes = events[events.kind == "finish"].set_index("turn") if len(events) else None
    rows, previous_finish = [], None
    for record in job.itertuples():
        admit = admits.loc[record.turn] if admits is not None and record.turn in admits.index else None
        finish = finishes.loc[record.turn] if finishes is not None and record.turn in finishes.index else None
        rows.append(
            {
                "turn": record.turn,
                "prompt_tokens": record.prompt_tokens,
                "cacheable_tokens": record.best_cached_tokens,
                "best_fraction": record.best_cached_tokens / record.prompt_tokens if record.prompt_tokens else np.nan,
                "hit_tokens": record.cached_tokens,
                "hit_fraction": record.cached_tokens / record.prompt_tokens if record.prompt_tokens else np.nan,
                "gap_s": admit.t - previous_finish if admit is not None and previous_finish is not None else np.nan,
                "free_blocks_at_admit": admit.free_blocks if admit is not None else np.nan,
                "action": finish.action if finish is not None else None,
            }
        )
        previous_finish = finish.t if finish is not None else None
    return pd.DataFrame(rows)


def cpu_tier_diagnosis(summary: pd.DataFrame, turns: pd.DataFrame, tool_time_s: float) -> pd.DataFrame:
    """Does each cell's CPU tier read back what it writes? Per cell with offload counters: bytes each
    way, the retention time of the tier (its size over the write rate) against the reuse gap a block must
    survive (tool time + mean TTFT of turns after the first), and the verdict."""
    columns = ["kv_offload_store_bytes", "kv_offload_load_bytes"]
    if not set(columns) <= set(summary.columns):
        return pd.DataFrame()
    cells = summary[(summary.status == CellStatus.DONE.value) & summary.kv_offload_store_bytes.notna() & (summary.dram_gb > 0)]
    rows = []
    for cell in cells.itertuples():
        later = turns[(turns.cell_key == cell.cell_key) & (turns.turn > 1)]
        reuse_gap = tool_time_s + (later.ttft_mean_s.mean() if len(later) else 0.0)
        # Over the load's own span (virtual for a simulated cell), not the worker's wall time.
        span = getattr(cell, "span_s", None) or cell.wall_s
        write_rate = cell.kv_offload_store_bytes / span if span else 0.0
        retention = retention_time_s(cell.dram_gb * GIB, write_rate)
        read_back = cell.kv_offload_load_bytes / cell.kv_offload_store_bytes if cell.kv_offload_store_bytes else np.nan
        hits = getattr(cell, "external_prefix_cache_hits", np.nan)
        queries = getattr(cell, "external_prefix_cache_queries", np.nan)
        if not cell.kv_offload_store_bytes:
            verdict = "idle: nothing offloaded"
        elif retention >= reuse_gap and read_back >= 0.1:
            verdict = "reads back what it writes"
        else:
            verdict = "a very busy /dev/null"
        rows.append(
            {
                "gpu": cell.gpu, "policy": cell.policy, "dram_gb": cell.dram_gb, "jps": cell.jps,
                "written_gib": cell.kv_offload_store_bytes / GIB, "read_gib": cell.kv_offload_load_bytes / GIB,
                "read_per_write": read_back, "external_hit_rate": hits / queries if queries else np.nan,
                "retention_s": retention, "reuse_gap_s": reuse_gap, "verdict": verdict,
            }
        )  # fmt: skip
    return pd.DataFrame(rows)


SERVE_COST_STATISTICS = {"t1_mean_s": "first turn (s)", "t_last_mean_s": "last turn (s)", "jct_mean_s": "job time (s)"}


def serve_cost(summary: pd.DataFrame) -> pd.DataFrame:
    """What Ray Serve adds: each one-replica cell through Serve beside the same cell direct (same GPU, budget, load,
    policy and seed, so the same schedule), each statistic direct, through Serve, and their ratio. Empty where no
    one-replica cell went through Serve."""
    done = summary[(summary.status == CellStatus.DONE.value) & (summary.replicas == 1)]
    if "router" not in done or not done.router.notna().any():
        return pd.DataFrame()
    keys = ["gpu", "dram_gb", "jps", "kv_policy", "seed"]
    columns = list(SERVE_COST_STATISTICS)
    paired = done[done.router.isna()][keys + columns].merge(done[done.router.notna()][keys + columns], on=keys,
                                                           suffixes=(" direct", " serve"))  # fmt: skip
    for column, name in SERVE_COST_STATISTICS.items():
        paired[f"{name} serve/direct"] = paired[f"{column} serve"] / paired[f"{column} direct"]
        paired = paired.rename(columns={f"{column} direct": f"{name} direct", f"{column} serve": f"{name} serve"})
    return paired.reset_index(drop=True)


def policy_router(summary: pd.DataFrame) -> pd.DataFrame:
    """Cells of several replicas: per GPU, DRAM budget, load, replica count and KV policy, each router's mean job
    time, the share of their best prefix the later turns found, and how many of them moved replica (means over
    trials). Empty where no cell had more than one replica."""
    routed = summary[(summary.status == CellStatus.DONE.value) & (summary.replicas > 1)]
    if not len(routed):
        return pd.DataFrame()
    table = routed.pivot_table(index=["gpu", "dram_gb", "jps", "replicas", "kv_policy"], columns="router",
                               values=["jct_mean_s", "prefix_kept_pct", "turns_moved_pct"], aggfunc="mean")  # fmt: skip
    table.columns = [f"{router}: {value}" for value, router in table.columns]
    return table[sorted(table.columns)].reset_index()


def rank_holdings(cells: list[CellSpec]) -> pd.DataFrame:
    """Per GPU type, tensor-parallel degree, DRAM budget and CPU tier of ``cells``: what each rank of a replica holds,
    by the sizing library (the weights and KV pool it predicts to within 0.3% of what vLLM sized on an H200): its share
    of the weights and of the KV pool, the pool's tokens (every rank holds its share of each token's heads), and its
    share of the CPU tier its policies allocate from the budget (the engine setup's ``tier_gib``: none for a policy
    without one), with those policies."""
    rows: dict[tuple, dict] = {}
    for cell in cells:
        setup = cell.engine_setup
        tier_gib = setup.tier_gib
        shape = (cell.gpu, cell.tp, cell.dram_gb, tier_gib)
        if shape in rows:
            rows[shape]["policies"] = ", ".join(sorted({*rows[shape]["policies"].split(", "), cell.policy}))
            continue
        if cell.gpu not in GPU_TYPES:
            continue
        try:
            arch = load_model(cell.model)
        except ValueError:
            continue
        sizing = setup.sizing(arch)
        rows[shape] = {"gpu": cell.gpu, "tp": cell.tp, "dram_gb": cell.dram_gb, "policies": cell.policy,
                       "weights_gb_per_rank": sizing.rank_weight_bytes / 1e9,
                       "kv_gib_per_rank": sizing.rank_kv_bytes / GIB, "kv_tokens": sizing.gpu_kv_tokens,
                       "cpu_tier_gib_per_rank": sizing.rank_cpu_kv_bytes / GIB if tier_gib else 0.0}  # fmt: skip
    return pd.DataFrame(list(rows.values()))
