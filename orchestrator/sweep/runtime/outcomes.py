"""What an attempt's end means: an outcome collected from its worker, a worker that died or raised, a node that left
the cluster under it, a worker silent past its cell's limit, a budgeted cell run past its allowance. Each becomes one
outcome, recorded once through the ledger (``runtime.ledger``), charged to a budgeted run's spending, and, where the
cell may be tried again, put back at the head of its queue (``runtime.queue``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from orchestrator.budget.cost import start_spent_s
from orchestrator.budget.spend import OVERRUN_LIMIT
from orchestrator.cell.spec import EngineKind
from orchestrator.inputs.validation import first_line
from orchestrator.records.cell import CellOutcome, CellStatus, FailureKind
from orchestrator.sweep.cluster.inventory import NodeInfo
from orchestrator.sweep.planning.spec import RunLimits
from orchestrator.sweep.runtime.ledger import CellLedger
from orchestrator.sweep.runtime.pool import InFlight, Worker, WorkerPool
from orchestrator.sweep.runtime.queue import CellQueue

# Extra time the driver allows a worker beyond the cell's own limit before it kills the worker.
DRIVER_GRACE_S = 120.0


class Outcomes:
    """Ends the pool's attempts as outcomes; ``wall_times`` holds the done cells' wall times, for the progress's
    estimate of what is left. ``recorded`` runs after each outcome is recorded."""

    def __init__(self, pool: WorkerPool, queue: CellQueue, ledger: CellLedger, limits: RunLimits,
                 event: Callable[[str], None], recorded: Callable[[], None]):  # fmt: skip
        self.pool, self.queue, self.ledger, self.limits = pool, queue, ledger, limits
        self.event, self.recorded = event, recorded
        self.wall_times: list[float] = []

    def collect(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for an attempt to end, and record each that did."""
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

    def enforce_backstop(self) -> None:
        """A worker that has not answered long after its cell's limit is killed (its replica dies with it); in a
        budgeted run, so is one whose cell has run past its allowance."""
        if self.queue.measuring is not None:
            self._stop_overruns()
        for worker in self.pool.in_flight():
            attempt = worker.attempt
            limit_s = self.limits.cell_limit_s(attempt.cell.workload) + DRIVER_GRACE_S
            if time.monotonic() - attempt.started_at > limit_s:
                self.pool.release(worker, restart=True)
                self._record(attempt, _lost_outcome(attempt, worker, FailureKind.WORKER_LOST,
                                                    f"worker silent for {limit_s:g} s", False))  # fmt: skip

    def _node_lost(self, worker: Worker, node: NodeInfo, error: BaseException) -> None:
        """The attempt on a node that left the cluster ends failed, naming the node; its cell is retried uncharged
        on the type's other workers, or on a node that joins or the autoscaler brings up."""
        self.pool.drop_node(node)
        attempt = self.pool.release(worker, restart=True)
        gpu = attempt.cell.placement
        retryable = self.queue.node_lost(attempt.cell)
        left = self.pool.num_slots(gpu)
        where = (f"{left} {gpu} slot(s) left" if left
                 else f"no {gpu} node left: waiting up to {self.pool.cluster.timeout_s:g} s for one")  # fmt: skip
        self.event(f"{node.label} left the cluster ({where})")
        reason = f"{node.label} lost mid-cell: {first_line(error)}"
        self._record(attempt, _lost_outcome(attempt, worker, FailureKind.NODE_LOST, reason, retryable))

    def _stop_overruns(self) -> None:
        """A real cell that has run past ``OVERRUN_LIMIT`` times its estimate is stopped as a silent worker is,
        charged what it ran (``_record``), and left for a later run: its attempt is interrupted on a time limit, and
        not retried in this run. One that has ended meanwhile is left to ``collect``."""
        import ray

        measuring = self.queue.measuring
        spending = measuring.spending
        over = set(spending.overrun(spending.clock()))
        for worker in [worker for worker in self.pool.in_flight() if worker.attempt.cell.key in over]:
            if ray.wait([worker.attempt.ref], timeout=0)[0]:
                continue
            attempt, commitment = worker.attempt, spending.running[worker.attempt.cell.key]
            why = (f"stopped after {spending.clock() - commitment.began:.0f} s, past {OVERRUN_LIMIT:g} x its "
                   f"estimate of {commitment.estimate_s:.0f} s")  # fmt: skip
            measuring.stopped[attempt.cell.key] = why
            self.pool.release(worker, restart=True)
            lost = _lost_outcome(attempt, worker, FailureKind.TIME_LIMIT, f"budget: {why}", False)
            self._record(attempt, replace(lost, status=CellStatus.INTERRUPTED))

    def _record(self, attempt: InFlight, outcome: CellOutcome) -> None:
        cell = attempt.cell
        row = self.ledger.record(attempt.started, outcome)
        if self.queue.measuring is not None and cell.engine is not EngineKind.SIM:
            start_s = start_spent_s(row.replica_start_s, row.setup_s)
            self.queue.measuring.spending.end(cell, time.monotonic() - attempt.started_at, start_s,
                                              outcome.status.is_done, outcome.failure_kind is FailureKind.TIME_LIMIT)
        if outcome.status.is_done:
            self.wall_times.append(row.wall_s)
            started = f"; its replica started in {row.replica_start_s:.0f} s" if row.replica_start_s is not None else ""
            self.event(
                f"done {cell.label}: mean JCT {row.jct_mean_s:.2f} s, {row.num_completed}/{row.num_jobs} jobs "
                f"completed, {row.num_timeouts} timeouts ({row.wall_s:.0f} s{started})"
                if row.jct_mean_s is not None else f"done {cell.label}: no job completed"
            )  # fmt: skip
        else:
            retry = self.queue.retry(cell, outcome.retryable, self.limits.max_attempts)
            self.event(f"{outcome.status.value} {cell.label} (attempt {attempt.started.number}): {outcome.reason}"
                       + ("; retrying" if retry else ""))  # fmt: skip
        self.recorded()


def _lost_outcome(attempt: InFlight, worker: Worker, kind: FailureKind, reason: str, retryable: bool) -> CellOutcome:
    started_unix = time.time() - (time.monotonic() - attempt.started_at)
    return CellOutcome.failure(attempt.cell, kind, reason, retryable, worker.slot.node_id, started_unix)


def _last_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
