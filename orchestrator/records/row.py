"""One row of ``summary.parquet``: a cell of the grid, its status and, once done, its summary and run facts.

The field order is the column order; the first columns are the results contract, which other people's
scripts read. Every quantity keeps the name ``CellSummary`` gives it; the run facts come from the
attempt's ``CellConfig``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

from orchestrator.records.cell import CellConfig, CellStatus, NodeStack, TierCounters
from orchestrator.records.names import current_names
from orchestrator.records.summary import CellSummary


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
    # The contract's columns, in this order: other people's scripts read them.
    sweep: str  # the sweep's name: its folder under the results directory and its MLflow experiment
    cell_key: str  # the cell's identity: a hash of everything that defines it, its folder under cells/
    engine: str  # vllm, sim (simulated) or fake (the orchestration's stand-in server)
    gpu: str  # the Ray accelerator type (H200, H100, A100, L40S, ...), or cpu
    policy: str  # the KV policy (docs/policies.md)
    jps: float  # the jobs' arrival rate
    dram_gb: float  # the CPU DRAM budget: a policy's CPU tier where it has one
    status: str  # done, failed, hung, interrupted (the last attempt), pending (with its reason) or not_run
    num_jobs: int | None = None  # jobs the schedule planned
    num_completed: int | None = None  # jobs whose every turn completed
    num_timeouts: int | None = None  # jobs cut by a request or job timeout (counted, never dropped)
    jct_mean_s: float | None = None  # job completion time over the completed jobs, from each job's arrival
    jct_p50_s: float | None = None
    jct_p90_s: float | None = None
    jct_p99_s: float | None = None
    t1_mean_s: float | None = None  # the first turn's mean latency, from its scheduled time
    t_last_mean_s: float | None = None  # each job's last turn's latency (T8 in the source study's workload)
    # The rest of the cell's identity and summary.
    seed: int | None = None  # the schedule's seed
    model: str | None = None
    weights: str | None = None  # real, or dummy (random weights of the model's shapes)
    scale: float | None = None  # the factor on every prompt size (system prompt, tool outputs)
    duration_s: float | None = None  # the arrival window
    tool_time_s: float | None = None  # the mean, where tool times are drawn
    workload_source: str | None = None  # source-study, parametric or trace
    load_multiplier: float | None = None  # a replay's rate over the trace's own
    max_context: int | None = None  # jobs with a longer request were dropped whole ...
    num_jobs_dropped: int | None = None  # ... this many, in the done attempt's schedule
    replicas: int | None = None  # behind a router, when more than one
    router: str | None = None  # round-robin, least-loaded, session-affinity or prefix-aware
    tp: int = 1  # tensor-parallel degree: the GPUs of one replica
    sim_stack: str | None = None  # a simulated GPU cell: the engine stack it simulated (sim/stacks.py)
    num_errors: int | None = None  # jobs ended by an error answer
    t_last_over_t1: float | None = None  # the last turn's mean latency over the first's
    jct_censored_mean_s: float | None = None  # every job's time, one cut short counted to its cut
    jct_censored_lo_s: float | None = None  # ... its 95% interval (a bootstrap over the jobs)
    jct_censored_hi_s: float | None = None
    completion_pct: float | None = None  # completed jobs over planned
    dispatch_lag_p50_ms: float | None = None  # how late the client sent requests against their scheduled times
    dispatch_lag_p99_ms: float | None = None
    dispatch_lag_max_ms: float | None = None
    span_s: float | None = None  # first arrival to last job end (virtual time for a simulated cell)
    num_pins: int | None = None  # Continuum's pins over the cell (none for other policies)
    pin_carried_pct: float | None = None  # pins that carried a job's KV to its next turn
    pin_expired_pct: float | None = None  # pins whose time to live ran out first
    pin_gave_way_pct: float | None = None  # pins taken for another request under pressure
    pin_abandoned_pct: float | None = None  # pins held for a job that never came back
    pin_in_vain_block_s: float | None = None  # blocks times seconds held by pins that carried nothing
    prefix_kept_pct: float | None = None  # turns after the first: the share of their best prefix found cached
    turns_moved_pct: float | None = None  # turns after the first served by another replica than the previous
    # Against the sweep's SLO (--slo; docs/capacity.md), where it has one.
    slo: str | None = None  # the targets, e.g. jct_p90=60s,ttft_p99=2s
    slo_met: str | None = None  # met, missed or unsure: every target within its limit at 95%, any beyond, or neither
    slo_targets: str | None = None  # each target in words: statistic, 95% interval, jobs; too few: how many would do
    good_pct: float | None = None  # jobs that completed within every limit
    good_lo_pct: float | None = None  # ... its 95% interval
    good_hi_pct: float | None = None
    goodput_jps: float | None = None  # jobs per second within the SLO: that share of the offered load
    goodput_lo_jps: float | None = None  # ... its 95% interval
    goodput_hi_jps: float | None = None
    # Where the simulator predicted the cell before it was measured (a budgeted sweep; records/prediction.py).
    predicted_jct_mean_s: float | None = None  # its censored mean job time, predicted
    predicted_band_pct: float | None = None  # the simulator's error band for the cell's GPU type and policy
    sim_error_pct: float | None = None  # (predicted - measured) / measured
    # A cell that is not done.
    reason: str | None = None  # why a cell is pending
    # The attempt behind a done row (``attempt_columns``).
    run_id: str | None = None  # the attempt's MLflow run
    attempt: int | None = None  # 1 for a cell's first attempt, counted over every run of the sweep
    device_name: str | None = None  # what the server reported (e.g. NVIDIA H100 80GB HBM3)
    vllm_version: str | None = None
    node_id: str | None = None  # the Ray node of the cell's worker
    gpu_ids: str | None = None  # the GPUs Ray gave the replica's worker, comma-separated (a routed cell's: None)
    started_unix: float | None = None
    finished_unix: float | None = None
    wall_s: float | None = None  # the attempt's wall time, the replica's start included
    replica_reused: bool | None = None  # on a replica kept from the cell before, after a proven-clean reset
    replica_replaced: str | None = None  # why a reusable replica was not reused
    replica_start_s: float | None = None  # the replica's start, when the cell started one
    setup_s: float | None = None  # from the worker taking the cell to its load's start, the replica's start included
    schedule_fingerprint: str | None = None  # cells compare only on one schedule
    num_preemptions: int | None = None  # vLLM's counter over the cell (the simulator's own count)
    num_evicted_blocks: int | None = None  # cached blocks the engine evicted over the cell
    kv_offload_store_bytes: float | None = None  # to the CPU tier (vLLM's counter, where its connector exports it)
    kv_offload_load_bytes: float | None = None  # back from the CPU tier
    external_prefix_cache_queries: float | None = None  # prompt tokens vLLM looked up in the CPU tier
    external_prefix_cache_hits: float | None = None  # of those, the tokens the tier had
    # The serving stack on the cell's node: vllm, lmcache, torch, CUDA, driver.
    stack_vllm: str | None = None
    stack_lmcache: str | None = None
    stack_torch: str | None = None
    stack_cuda: str | None = None
    stack_driver: str | None = None
    stack_lmcache_ops_error: str | None = None  # why LMCache's compiled ops did not load, where they did not

    @classmethod
    def of(cls, sweep: str, cell_columns: Mapping[str, object], status: CellStatus, summary: CellSummary | None = None,
           attempt: Attempt | None = None, reason: str | None = None) -> SummaryRow:  # fmt: skip
        """The row of a cell whose identity columns (its key, engine, GPU type, policy, load and workload) are
        ``cell_columns``: a cell spec's ``summary_columns()``."""
        return cls(
            sweep=sweep, status=status.value, reason=reason, **cell_columns,
            **(summary.scalars() if summary else {}), **(attempt_columns(attempt) if attempt else {}),
        )  # fmt: skip

    @classmethod
    def from_json(cls, payload: dict) -> SummaryRow:
        """A row as ``to_json`` wrote it (older names renamed, columns this version lacks left out)."""
        renamed = current_names(payload)
        return cls(**{spec.name: renamed[spec.name] for spec in fields(cls) if spec.name in renamed})

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def columns(cls) -> list[str]:
        return [spec.name for spec in fields(cls)]


def attempt_tags(row: SummaryRow) -> dict[str, str]:
    """The run facts of a done row as its MLflow run's tags (those with a value; the run id is the run's own)."""
    names = {*_ATTEMPT_FACTS, "slo", "slo_met", "slo_targets"} | {spec.name for spec in fields(TierCounters)} | {f"stack_{spec.name}" for spec in fields(NodeStack)}
    return {name: str(value) for name, value in row.to_json().items() if name in names and value is not None}


_ATTEMPT_FACTS = ("attempt", "device_name", "vllm_version", "node_id", "gpu_ids", "started_unix", "finished_unix", "wall_s",
                  "replica_reused", "replica_replaced", "replica_start_s", "setup_s", "schedule_fingerprint",
                  "num_jobs_dropped", "num_preemptions", "num_evicted_blocks")  # fmt: skip


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
        "setup_s": config.setup_s,
        "schedule_fingerprint": config.schedule_fingerprint,
        "num_jobs_dropped": config.schedule_stats.num_jobs_dropped if config.schedule_stats else None,
        "num_preemptions": config.num_preemptions,
        "num_evicted_blocks": config.num_evicted_blocks,
        **asdict(config.tier_counters),
        **{f"stack_{name}": value for name, value in asdict(stack).items()},
    }
