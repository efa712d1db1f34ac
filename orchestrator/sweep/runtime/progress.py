"""Progress of a sweep: cells done of total, what each running cell is doing, and an ETA.

One snapshot renders to plain lines (pure). In a terminal they redraw in place (rich); elsewhere, such
as ``ray job logs``, they are printed every ``interval_s`` as ordinary timestamped lines.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field


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
