"""The cell worker: runs cells one after another on one GPU (or the CPU engine), as a Ray actor.

Its replica is kept across cells with the same server configuration when a reset is proven to have
emptied every cache tier, else started afresh, and the cell records why (``replica.keeper``). While a
cell's load runs it watches for three faults: the replica exiting (``failed``, retryable), the engine
making no progress with requests in flight (``hung``), and the cell's time limit (``failed``). It writes
nothing durable: the records, server log and scheduler trace go back to the driver, the only writer of results
and tracking.
"""

from __future__ import annotations

import enum
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial

from orchestrator.cell.spec import CellSpec, EngineKind, SIM
from orchestrator.inputs.validation import first_line
from orchestrator.mechanisms.tier import NodeNeed
from orchestrator.models.served import ModelUnavailable, ServedModel, served_model
from orchestrator.policies.catalog import get_policy
from orchestrator.records.cell import (
    CellConfig,
    CellOutcome,
    CellStatus,
    EngineFacts,
    FailureKind,
    NodeStack,
    RequestOptions,
    ResetProof,
    TierCounters,
)
from orchestrator.records.scheduler_trace import evicted_blocks
from orchestrator.records.scheduler_trace_file import parquet_of_entries, parquet_of_lines
from orchestrator.replica.config import EngineConfig
from orchestrator.replica.disk import disk_refusal
from orchestrator.replica.engines import CellEngines, EnginesPoll, OneReplica
from orchestrator.replica.keeper import ReplicaKeeper, ReplicaReuse, StartFailed
from orchestrator.replica.priority import at_normal_priority
from orchestrator.replica.probe import PREEMPTIONS
from orchestrator.replica.replica import ReplicaInfo
from orchestrator.replica.server import ServerStartError, StartLimits
from orchestrator.replica.stack import lmcache_refusal
from orchestrator.sim.cell_engine import cell_sim_engine
from orchestrator.sim.loop import Replicas, simulate
from orchestrator.sim.stacks import stack_calibration
from orchestrator.sweep.cluster.inventory import Slot
from orchestrator.sweep.planning.serving import ServedCell, served_cell
from orchestrator.sweep.planning.spec import RunLimits
from orchestrator.units import GIB
from orchestrator.workload.actor import ClientActors, InProcessRun, LoadRun
from orchestrator.workload.loadgen import ShardResult
from orchestrator.workload.plan import WorkloadPlan, build_plan
from orchestrator.workload.schedule import Schedule, schedule_for
from orchestrator.workload.tokenizer import token_counter_for


class WorkerPhase(str, enum.Enum):
    IDLE = "idle"
    STARTING = "starting"  # checking the node and starting (or reusing) the replica
    RESETTING = "resetting"  # proving the previous replica's caches empty
    RUNNING = "running"
    WAITING = "waiting for its worker"  # the driver's view of a cell whose worker has not picked it up


@dataclass(frozen=True)
class WorkerStatus:
    cell_key: str | None = None
    phase: WorkerPhase = WorkerPhase.IDLE
    jobs_finished: int = 0
    jobs_total: int = 0


class _Refused(Exception):
    """A cell that ends before its load runs, with the reason, whether another attempt may succeed, and the
    server log where a replica failed to start."""

    def __init__(self, reason: str, retryable: bool = False, server_log: str = "",
                 kind: FailureKind = FailureKind.REFUSED):  # fmt: skip
        super().__init__(reason)
        self.reason, self.retryable, self.server_log, self.kind = reason, retryable, server_log, kind


@dataclass(frozen=True)
class _Measured:
    """What a cell's load left behind on a real or fake engine."""

    status: CellStatus
    reason: str | None
    failure_kind: FailureKind | None
    crashed: bool
    load: ShardResult | None  # None unless the cell is done
    server_log: str
    scheduler_trace: bytes
    tier_counters: TierCounters
    num_preemptions: int | None
    options: RequestOptions
    plan_fingerprint: str
    replica: ReplicaInfo
    load_started_unix: float  # when its first job was due


class CellWorker:
    """Plain class; ``start_worker`` makes it a Ray actor. Not thread-safe except ``status``."""

    def __init__(self, node_id: str = ""):
        self._node_id = node_id or _current_node_id()
        self.keeper = ReplicaKeeper(resetting=self._resetting)
        self._clients: ClientActors | None = None  # the load's actors, made by the first cell that drives from actors
        self._status = WorkerStatus()

    def status(self) -> WorkerStatus:
        return self._status

    def run(self, cell: CellSpec, limits: RunLimits) -> CellOutcome:
        started = time.time()
        # The schedule is complete before anything starts: nothing expensive happens on the clock, and a request
        # the engine would refuse fails the cell here.
        schedule = schedule_for(cell.workload)
        try:
            if error := schedule.context_error(cell.engine_options.max_model_len):
                raise _Refused(error)
            if cell.engine is EngineKind.SIM:
                return self._simulate(cell, schedule, started)
            self._status = WorkerStatus(cell.key, WorkerPhase.STARTING)
            model = self._model(cell)
            served = served_cell(cell, model)
            stack = self._checked_stack(cell, served.engine)
            plan = build_plan(cell.workload, token_counter_for(model.directory), schedule)
            if cell.router is None:
                reuse = self._replica_for(served.engine, _start_limits(limits))
                ran = self._measure(cell, served, plan, limits, OneReplica(self.keeper.replica))
            else:
                reuse, ran = self._measure_routed(cell, served, plan, limits)
        except _Refused as refusal:
            return CellOutcome.failure(cell, refusal.kind, refusal.reason, refusal.retryable, self._node_id, started,
                                       refusal.server_log)  # fmt: skip
        finally:
            self._status = WorkerStatus()
        return _outcome(
            self._node_id, cell, schedule, started, ran.status, ran.reason, ran.failure_kind, retryable=ran.crashed,
            load=ran.load, server_log=ran.server_log, scheduler_trace=parquet_of_lines(ran.scheduler_trace),
            engine=served.engine,
            engine_facts=ran.replica.facts, tier_counters=ran.tier_counters, num_preemptions=ran.num_preemptions,
            num_evicted_blocks=evicted_blocks(ran.scheduler_trace), stack=stack,
            replica_reused=reuse.reused, replica_start_s=reuse.start_s, replica_start=reuse.start,
            reset_proof=reuse.proof, replica_replaced=reuse.replaced_because, request_options=ran.options,
            plan_fingerprint=ran.plan_fingerprint, server_argv=tuple(ran.replica.server_argv),
            server_env=dict(ran.replica.server_env), server_niceness=ran.replica.server_niceness,
            setup_s=ran.load_started_unix - started,
        )  # fmt: skip

    def _checked_stack(self, cell: CellSpec, engine: EngineConfig) -> NodeStack | None:
        """The node's serving stack for a real vLLM cell, refused where the cell's policy needs LMCache's
        compiled ops and they do not load, or local disk the node does not have."""
        policy = get_policy(cell.policy)
        needs_ops = NodeNeed.LMCACHE in policy.needs
        # A routed cell's replicas are Serve's, and one refused on its stack starts nothing: no launcher for either.
        via_launcher = cell.router is None and not needs_ops
        stack = self.keeper.node_stack(engine, via_launcher) if cell.engine is EngineKind.VLLM else None
        if stack is not None and needs_ops and (refusal := lmcache_refusal(stack)):
            raise _Refused(refusal)
        disk = policy.tier.disk_need(cell.dram_gb)
        # A routed cell's replicas run on one node (its gang's), side by side on its disk.
        if stack is not None and disk is not None and (refusal := disk_refusal(disk.path, disk.gib * cell.replicas)):
            raise _Refused(refusal)
        return stack

    def _model(self, cell: CellSpec) -> ServedModel:
        try:  # the fake engine reads the model's tokenizer and config, not its weights
            return served_model(cell.model, cell.weights, need_weights=cell.engine is EngineKind.VLLM)
        except ModelUnavailable as error:
            raise _Refused(str(error)) from None

    def _replica_for(self, engine: EngineConfig, start_limits: StartLimits) -> ReplicaReuse:
        try:
            return self.keeper.ensure(engine, start_limits)
        except StartFailed as failed:
            raise _Refused(f"replica did not start: {failed}", retryable=True, server_log=failed.log,
                           kind=FailureKind.REPLICA_START) from None

    def _running(self, cell_key: str, finished: int, total: int) -> None:
        self._status = WorkerStatus(cell_key, WorkerPhase.RUNNING, finished, total)

    def _resetting(self) -> None:
        self._status = WorkerStatus(self._status.cell_key, WorkerPhase.RESETTING)

    def _measure_routed(self, cell: CellSpec, served: ServedCell, plan: WorkloadPlan,
                        limits: RunLimits) -> tuple[ReplicaReuse, _Measured]:  # fmt: skip
        """The cell's replicas behind its router, as a Ray Serve application started for this cell alone (a
        replica set is not kept between cells: its replicas' caches would need a proof each). One replica behind
        Serve is how Serve's own cost is measured against the direct path."""
        from orchestrator.replica.replica_set import ReplicaSet

        self.keeper.drop()  # its server would hold the memory (and, on a GPU, the device) a replica set needs
        replicas = ReplicaSet(served.engine, cell.replicas, cell.router, cell_key=cell.key, seed=cell.seed,
                              replica_options=_replica_options(cell),
                              start_limits=_start_limits(limits))  # fmt: skip
        started = time.monotonic()
        try:
            replicas.start()
            reuse = ReplicaReuse(reused=False, start_s=time.monotonic() - started)
            return reuse, self._measure(cell, served, plan, limits, replicas)
        except ServerStartError as error:
            raise _Refused(f"replicas did not start: {first_line(error)}", retryable=True,
                           kind=FailureKind.REPLICA_START) from None
        finally:
            replicas.stop()

    def _measure(self, cell: CellSpec, served: ServedCell, plan: WorkloadPlan, limits: RunLimits,
                 engines: CellEngines) -> _Measured:  # fmt: skip
        """Run the cell's load on its replicas, watching for faults; what it left behind. When a replica
        crashed, hung or ran out of time, the load is abandoned and a single replica dropped (which ends every
        open stream)."""
        mark = engines.mark()
        before = engines.poll()
        options = RequestOptions(served.served_model_name, served.send_priority, served.answer_token_ids)
        self._running(cell.key, 0, len(plan.jobs))
        load_started_unix = time.time()
        load = self._start_load(plan, engines.base_url, options, limits)
        limit_s = limits.cell_limit_s(cell.workload)
        status, reason, kind = _watch(load, engines, before, limits, (time.monotonic() + limit_s, limit_s),
                                      partial(self._running, cell.key))  # fmt: skip
        shard = load.result() if status is CellStatus.DONE else None
        after = engines.poll()
        crashed = after.failure is not None  # a crash is worth another attempt; a hang or a time limit is not
        if crashed and shard is not None:
            status, shard, reason, kind = CellStatus.FAILED, None, after.failure, FailureKind.ENGINE_CRASH
        log, trace = engines.output_since(mark, shard.requests if shard else ())
        if shard is None:
            self.keeper.drop()
            load.cancel()
        tier_counters = TierCounters.summed([TierCounters.between(starts, ends)
                                             for starts, ends in zip(before.counters, after.counters)])
        num_preemptions = _counted(PREEMPTIONS, before.counters, after.counters)
        return _Measured(status, reason, kind, crashed, shard, log, trace, tier_counters, num_preemptions, options,
                         plan.fingerprint(), engines.infos[0], load_started_unix)  # fmt: skip

    def _simulate(self, cell: CellSpec, schedule: Schedule, started: float) -> CellOutcome:
        """The cell in the simulator: no replica, no clock; the same records, trace and configuration."""
        self._status = WorkerStatus(cell.key, WorkerPhase.RUNNING, 0, 0)
        engine = cell_sim_engine(cell.engine_setup, cell.workload, cell.cpu_profile,
                                 calibration=stack_calibration(cell.sim_stack))  # fmt: skip
        result = simulate(cell.workload, engine, schedule, Replicas(cell.replicas, cell.router, seed=cell.seed))
        scheduler = engine.scheduler
        counts = asdict(result.stats).items()
        summary = " ".join(f"{name}={value:.6g}" for name, value in counts if isinstance(value, (int, float)))
        return _outcome(
            self._node_id, cell, schedule, started, CellStatus.DONE, None, None, retryable=False,
            load=ShardResult(tuple(result.requests), tuple(result.jobs)),
            server_log=f"simulated {cell.label}: {summary}\n",
            scheduler_trace=parquet_of_entries(result.replica_scheduler_traces),
            engine=engine.config,
            engine_facts=EngineFacts(vllm_version=None, block_size=scheduler.block_size, num_kv_blocks=scheduler.num_blocks,
                                     kv_cache_tokens=scheduler.num_blocks * scheduler.block_size,
                                     device_name=f"simulated {cell.gpu}"),
            tier_counters=result.stats.tier_counters, num_preemptions=result.stats.num_preemptions,
            num_evicted_blocks=result.stats.evicted_blocks, simulation=result.stats,
        )  # fmt: skip

    def prove_reset(self) -> ResetProof:
        """Reset the current replica and prove it clean, as the next cell would (the doctor's check).
        Raises ``ResetError`` when the proof fails."""
        return self.keeper.prove_reset()

    def keeps_replica_for(self, cell: CellSpec) -> bool:
        """Whether ``cell`` would run on the replica now running (after a proven reset) rather than a new one."""
        replica = self.keeper.running()
        if replica is None or cell.engine is EngineKind.SIM:
            return False
        try:
            return served_cell(cell, self._model(cell)).engine == replica.engine
        except _Refused:  # its model cannot be served here: no replica would run it
            return False

    def replica_log(self) -> str:
        """The whole server log of the replica now running, its start at the top ('' when none runs)."""
        return self.keeper.log()

    def shutdown(self) -> None:
        if self._clients is not None:
            self._clients.shutdown()
        self.keeper.shutdown()

    def _start_load(self, plan, base_url: str, options: RequestOptions, limits: RunLimits) -> LoadRun:
        if limits.client_actors == 0:
            return InProcessRun(plan, base_url, options)
        if self._clients is None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            # At the node's niceness, as this worker and its server run (``replica.priority``).
            self._clients = ClientActors(at_normal_priority(
                {"scheduling_strategy": NodeAffinitySchedulingStrategy(self._node_id, soft=False)}))  # fmt: skip
        return self._clients.start(plan, base_url, options, limits.client_actors)


def start_worker(slot: Slot):
    """A cell worker actor for ``slot``, on its node: two threads so ``status`` answers while ``run`` works; never
    restarted by Ray, because the driver decides what a lost worker means for its cell. One that runs servers asks
    for its worker at the node's niceness (``replica.priority``); a simulating one does not, since its cells run in
    virtual time, which no niceness moves, and so it takes one of the node's prestarted Ray workers instead of
    waiting for a fresh one of its own runtime environment."""
    import ray

    options = {**slot.actor_options(), "max_concurrency": 2, "max_restarts": 0}
    if slot.gpu != SIM:
        options = at_normal_priority(options)
    return ray.remote(CellWorker).options(**options).remote(slot.node_id)


def _outcome(node_id: str, cell: CellSpec, schedule: Schedule, started: float, status: CellStatus, reason: str | None,
             failure_kind: FailureKind | None, *, retryable: bool, load: ShardResult | None, server_log: str,
             scheduler_trace: bytes,
             **config: object) -> CellOutcome:  # fmt: skip
    """A cell that ran, on any engine: its records, each request with its best possible prefix hit, and
    its configuration with what every engine records (``config`` adds the engine's own)."""
    return CellOutcome(
        cell_key=cell.key,
        status=status,
        reason=reason,
        retryable=retryable,
        requests=schedule.with_best_cached(load.requests) if load else (),
        jobs=load.jobs if load else (),
        config=CellConfig(cell_key=cell.key, cell=cell, node_id=node_id, host=platform.node(),
                          gpu_ids=_gpu_ids(), **_schedule_facts(schedule), **config),  # fmt: skip
        server_log=server_log,
        scheduler_trace=scheduler_trace,
        started_unix=started,
        finished_unix=time.time(),
        failure_kind=failure_kind,
    )


def _watch(load: LoadRun, engines: CellEngines, before: EnginesPoll, limits: RunLimits, time_limit: tuple[float, float],
           progressed: Callable[[int, int], None]) -> tuple[CellStatus, str | None, FailureKind | None]:  # fmt: skip
    """Wait for the load to finish; the status, reason and kind of failure of the cell if a fault ends it first.

    ``before`` is the replicas' poll from just before the load started; ``time_limit`` is the cell's (monotonic
    deadline, limit in seconds); ``progressed`` hears the jobs finished of the jobs in all as the load goes."""
    deadline, limit_s = time_limit
    last_work = before.work_done()
    last_progress = time.monotonic()
    while not load.wait(limits.poll_s):
        now = time.monotonic()
        poll = engines.poll()
        if poll.failure is not None:
            return CellStatus.FAILED, poll.failure, FailureKind.ENGINE_CRASH
        progress = load.progress()
        progressed(progress.jobs_finished, progress.jobs_total)
        work = poll.work_done()
        if progress.requests_in_flight == 0 or (work is not None and work != last_work):
            last_work, last_progress = work, now
        elif now - last_progress > limits.hang_timeout_s:
            return CellStatus.HUNG, (
                f"no engine progress for {limits.hang_timeout_s:g} s with {progress.requests_in_flight} requests in flight"
            ), FailureKind.NO_PROGRESS
        if now > deadline:
            return CellStatus.FAILED, f"cell time limit of {limit_s:g} s exceeded", FailureKind.TIME_LIMIT
    return CellStatus.DONE, None, None


def _start_limits(limits: RunLimits) -> StartLimits:
    return StartLimits(timeout_s=limits.health_timeout_s, stall_s=limits.start_stall_s)


def _replica_options(cell: CellSpec) -> dict:
    """Where Serve places each replica of a routed cell: on its ``tp`` GPUs of the cell's type (one node's) with the
    host memory of one replica (those of the gang that stepped aside for it), or (the CPU engine) anywhere, taking no CPU of Ray's
    count, as the cell worker that runs it holds the one it needs."""
    if cell.device == "cpu":
        return {"num_cpus": 0}
    options = {"num_cpus": 0, "num_gpus": cell.tp, "accelerator_type": cell.gpu}
    return options | ({"memory": int(cell.replica_host_gib * GIB)} if cell.replica_host_gib > 0 else {})


def _schedule_facts(schedule: Schedule) -> dict:
    """What a cell's configuration records of its schedule, whichever engine ran it."""
    return {"schedule_fingerprint": schedule.fingerprint(), "schedule_stats": schedule.stats()}


def _counted(counter: str, before: Sequence[dict[str, float]], after: Sequence[dict[str, float]]) -> int | None:
    """How much ``counter`` grew during the cell over all its replicas; None where the engine does not export it."""
    grown = [int(ends[counter] - starts.get(counter, 0.0)) for starts, ends in zip(before, after) if counter in ends]
    return sum(grown) if grown else None


def _gpu_ids() -> tuple[str, ...]:
    """The GPUs Ray assigned this worker (a tensor-parallel replica's all of them); () outside Ray or without any."""
    try:
        import ray

        return tuple(str(gpu) for gpu in ray.get_gpu_ids()) if ray.is_initialized() else ()
    except ImportError:
        return ()


def _current_node_id() -> str:
    try:
        import ray

        if ray.is_initialized():
            return ray.get_runtime_context().get_node_id()
    except ImportError:
        pass
    return "local"
