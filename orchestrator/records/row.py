"""One row of ``summary.parquet``: a cell of the grid, its status and, once done, its summary and run facts.

The field order is the column order; the first columns are BRIEF section 6's contract, which other
people's scripts read. Every quantity keeps the name ``CellSummary`` gives it; the run facts come from the
attempt's ``CellConfig``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING

from orchestrator.records.cell import CellConfig, CellStatus, NodeStack, TierCounters
from orchestrator.records.summary import CellSummary

if TYPE_CHECKING:  # the contract reads a cell spec's fields; it imports nothing of the stages
    from orchestrator.sweep.planning.cells import CellSpec

# Names an older version wrote to a done cell's summary.json (read back when a sweep resumes).
_LEGACY_NAMES = {"t8_mean_s": "t_last_mean_s", "t8_over_t1": "t_last_over_t1"}


@dataclass(frozen=True)
class Attempt:
    """The attempt that produced a done row, as the driver saw it."""

    run_id: str
    number: int  # 1 for a cell's first attempt, counted over every run of the sweep
    started_unix: float
    finished_unix: float
    config: CellConfig


@dataclass(frozen=True)
class SummaryRow:
    # BRIEF section 6's contract columns, in this order.
    sweep: str
    cell_key: str
    engine: str
    gpu: str
    policy: str
    jps: float
    dram_gb: float
    status: str
    n_jobs: int | None = None
    n_completed: int | None = None
    n_timeouts: int | None = None
    jct_mean_s: float | None = None
    jct_p50_s: float | None = None
    jct_p90_s: float | None = None
    jct_p99_s: float | None = None
    t1_mean_s: float | None = None
    t_last_mean_s: float | None = None
    # The rest of the cell's identity and summary.
    seed: int | None = None
    model: str | None = None
    weights: str | None = None  # real, or dummy (random weights of the model's shapes)
    scale: float | None = None
    duration_s: float | None = None
    tool_time_s: float | None = None  # the mean, where tool times are drawn
    workload_source: str | None = None  # source-study, parametric or trace
    load_multiplier: float | None = None  # a replay's rate over the trace's own
    max_context: int | None = None  # jobs with a longer request were dropped whole ...
    n_jobs_dropped: int | None = None  # ... this many, in the done attempt's schedule
    replicas: int | None = None  # behind a router, when more than one
    router: str | None = None
    tp: int = 1  # tensor-parallel degree: the GPUs of one replica
    n_errors: int | None = None
    t_last_over_t1: float | None = None
    jct_censored_mean_s: float | None = None
    jct_censored_lo_s: float | None = None
    jct_censored_hi_s: float | None = None
    completion_pct: float | None = None
    dispatch_lag_p50_ms: float | None = None
    dispatch_lag_p99_ms: float | None = None
    dispatch_lag_max_ms: float | None = None
    span_s: float | None = None
    n_pins: int | None = None
    pin_carried_pct: float | None = None
    pin_expired_pct: float | None = None
    pin_gave_way_pct: float | None = None
    pin_abandoned_pct: float | None = None
    pin_in_vain_block_s: float | None = None
    prefix_kept_pct: float | None = None
    turns_moved_pct: float | None = None
    reason: str | None = None  # why a cell is pending
    # The attempt behind a done row (``attempt_columns``).
    run_id: str | None = None
    attempt: int | None = None
    device_name: str | None = None
    vllm_version: str | None = None
    node_id: str | None = None
    gpu_ids: str | None = None  # the GPUs Ray gave the replica's worker, comma-separated (a routed cell's: None)
    started_unix: float | None = None
    finished_unix: float | None = None
    wall_s: float | None = None
    replica_reused: bool | None = None
    replica_replaced: str | None = None  # why a reusable replica was not reused
    replica_start_s: float | None = None
    schedule_fingerprint: str | None = None  # cells compare only on one schedule
    n_preemptions: int | None = None
    n_evicted_blocks: int | None = None  # cached blocks the engine evicted over the cell
    kv_offload_store_bytes: float | None = None
    kv_offload_load_bytes: float | None = None
    external_prefix_cache_queries: float | None = None
    external_prefix_cache_hits: float | None = None
    # The serving stack on the cell's node: vllm, lmcache, torch, CUDA, driver.
    stack_vllm: str | None = None
    stack_lmcache: str | None = None
    stack_torch: str | None = None
    stack_cuda: str | None = None
    stack_driver: str | None = None
    stack_lmcache_ops_error: str | None = None

    @classmethod
    def of(cls, sweep: str, cell: CellSpec, status: CellStatus, summary: CellSummary | None = None,
           attempt: Attempt | None = None, reason: str | None = None) -> SummaryRow:  # fmt: skip
        workload = cell.workload
        return cls(
            sweep=sweep, cell_key=cell.key, engine=cell.engine.value, gpu=cell.gpu, policy=cell.policy, jps=cell.jps,
            dram_gb=cell.dram_gb, status=status.value, seed=cell.seed, model=cell.model, weights=cell.weights.value,
            scale=workload.scale,
            duration_s=workload.arrival_window_s, tool_time_s=workload.mean_shape().tool_time_s,
            workload_source=workload.source, load_multiplier=workload.load_multiplier(), reason=reason,
            max_context=workload.max_context,
            replicas=cell.replicas, router=cell.router.value if cell.router else None, tp=cell.tp,
            **(summary.scalars() if summary else {}), **(attempt_columns(attempt) if attempt else {}),
        )  # fmt: skip

    @classmethod
    def from_json(cls, payload: dict) -> SummaryRow:
        """A row as ``to_json`` wrote it (older names renamed, columns this version lacks left out)."""
        renamed = {_LEGACY_NAMES.get(name, name): value for name, value in payload.items()}
        return cls(**{spec.name: renamed[spec.name] for spec in fields(cls) if spec.name in renamed})

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def columns(cls) -> list[str]:
        return [spec.name for spec in fields(cls)]


def attempt_tags(row: SummaryRow) -> dict[str, str]:
    """The run facts of a done row as its MLflow run's tags (those with a value; the run id is the run's own)."""
    names = set(_ATTEMPT_FACTS) | {spec.name for spec in fields(TierCounters)} | {f"stack_{spec.name}" for spec in fields(NodeStack)}
    return {name: str(value) for name, value in row.to_json().items() if name in names and value is not None}


_ATTEMPT_FACTS = ("attempt", "device_name", "vllm_version", "node_id", "gpu_ids", "started_unix", "finished_unix", "wall_s",
                  "replica_reused", "replica_replaced", "replica_start_s", "schedule_fingerprint", "n_jobs_dropped",
                  "n_preemptions", "n_evicted_blocks")  # fmt: skip


def attempt_columns(attempt: Attempt) -> dict:
    """The run facts of an attempt, by their column names (also the tags of its MLflow run)."""
    config = attempt.config
    facts = config.engine_facts
    stack = config.stack or NodeStack(None, None, None, None, None, None)
    return {
        "run_id": attempt.run_id,
        "attempt": attempt.number,
        "device_name": facts.device_name if facts else None,
        "vllm_version": facts.vllm_version if facts else None,
        "node_id": config.node_id,
        "gpu_ids": ",".join(config.gpu_ids) or None,
        "started_unix": attempt.started_unix,
        "finished_unix": attempt.finished_unix,
        "wall_s": attempt.finished_unix - attempt.started_unix,
        "replica_reused": config.replica_reused,
        "replica_replaced": config.replica_replaced,
        "replica_start_s": config.replica_start_s,
        "schedule_fingerprint": config.schedule_fingerprint,
        "n_jobs_dropped": config.schedule_stats.num_jobs_dropped if config.schedule_stats else None,
        "n_preemptions": config.n_preemptions,
        "n_evicted_blocks": config.n_evicted_blocks,
        **asdict(config.tier_counters),
        **{f"stack_{name}": value for name, value in asdict(stack).items()},
    }
