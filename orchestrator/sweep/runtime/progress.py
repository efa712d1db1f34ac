"""Progress of a sweep: cells done of total, what each running cell is doing, and an ETA.

One snapshot renders to plain lines (pure). In a terminal they redraw in place (rich); elsewhere, such
as ``ray job logs``, they are printed every ``interval_s`` as ordinary timestamped lines.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from orchestrator.records.cell import CellStatus
from orchestrator.sweep.runtime.pool import WorkerPool
from orchestrator.sweep.runtime.worker import WorkerPhase, WorkerStatus


@dataclass(frozen=True)
class RunningCell:
    label: str
    attempt: int
    phase: str
    jobs_finished: int
    jobs_total: int
    elapsed_s: float


@dataclass(frozen=True)
class ProgressSnapshot:
    sweep: str
    total: int
    done: int
    failed: int
    hung: int
    queued: int
    pending_by_gpu: dict[str, int] = field(default_factory=dict)
    running: tuple[RunningCell, ...] = ()
    eta_s: float | None = None

    @classmethod
    def of(cls, sweep: str, statuses: Sequence[CellStatus | None], running: tuple[RunningCell, ...], queued: int,
           pending: Sequence[str], wall_times: Sequence[float], workers: int) -> ProgressSnapshot:  # fmt: skip
        """The snapshot of a sweep whose cells' last statuses are ``statuses``, ``pending`` the GPU type of each cell
        that pends; its ETA is the done cells' mean wall time over what is queued and what the running cells have
        left, spread over ``workers``."""
        eta = None
        if wall_times and workers:
            per_cell = sum(wall_times) / len(wall_times)
            left_in_running = sum(max(per_cell - cell.elapsed_s, 0.0) for cell in running)
            eta = (queued * per_cell + left_in_running) / workers
        return cls(sweep, len(statuses), statuses.count(CellStatus.DONE), statuses.count(CellStatus.FAILED),
                   statuses.count(CellStatus.HUNG), queued, dict(Counter(pending)), running, eta)  # fmt: skip


def running_cells(pool: WorkerPool) -> tuple[RunningCell, ...]:
    """What each of ``pool``'s attempts in flight is doing, as its worker last said (waiting where it has not said
    yet)."""
    in_flight, running = pool.in_flight(), []
    for worker, status in zip(in_flight, pool.statuses(in_flight)):
        attempt = worker.attempt
        if status is None or status.cell_key != attempt.cell.key:
            status = WorkerStatus(attempt.cell.key, WorkerPhase.WAITING)
        running.append(RunningCell(attempt.cell.label, attempt.started.number, status.phase.value, status.jobs_finished,
                                   status.jobs_total, time.monotonic() - attempt.started_at))  # fmt: skip
    return tuple(running)


def progress_lines(snapshot: ProgressSnapshot) -> list[str]:
    parts = [f"{snapshot.done}/{snapshot.total} done", f"{len(snapshot.running)} running", f"{snapshot.queued} queued"]
    if snapshot.failed:
        parts.append(f"{snapshot.failed} failed")
    if snapshot.hung:
        parts.append(f"{snapshot.hung} hung")
    if snapshot.pending_by_gpu:
        absent = ", ".join(f"{count} {gpu}" for gpu, count in sorted(snapshot.pending_by_gpu.items()))
        parts.append(f"pending (GPU type absent): {absent}")
    parts.append(f"ETA {format_duration(snapshot.eta_s)}" if snapshot.eta_s is not None else "ETA after the first cell")
    lines = [f"[{snapshot.sweep}] " + " · ".join(parts)]
    for cell in snapshot.running:
        jobs = f"{cell.jobs_finished}/{cell.jobs_total} jobs" if cell.jobs_total else ""
        lines.append(f"  {cell.label} (attempt {cell.attempt}): {cell.phase} {jobs} {format_duration(cell.elapsed_s)}".rstrip())
    return lines


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


LIVE_REFRESH_S = 1.0


class ProgressReporter:
    """Shows snapshots live in a terminal, or prints them every ``interval_s``; events always print."""

    def __init__(self, interval_s: float, live: bool | None = None):
        self._interval_s = interval_s
        self._live = None
        self._last_update = 0.0
        if live if live is not None else sys.stdout.isatty():
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(), refresh_per_second=2, transient=True)
            self._live.start()

    def due(self) -> bool:
        """Whether ``update`` would show something now (snapshots cost a round trip to every worker)."""
        interval = LIVE_REFRESH_S if self._live is not None else self._interval_s
        return time.monotonic() - self._last_update >= interval

    def update(self, snapshot: ProgressSnapshot) -> None:
        self._last_update = time.monotonic()
        lines = progress_lines(snapshot)
        if self._live is not None:
            from rich.text import Text

            self._live.update(Text("\n".join(lines)))
        else:
            self.event("\n".join(lines))

    def event(self, line: str) -> None:
        stamped = f"{time.strftime('%H:%M:%S')} {line}"
        if self._live is not None:
            self._live.console.print(stamped, markup=False, highlight=False)
        else:
            print(stamped, flush=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
