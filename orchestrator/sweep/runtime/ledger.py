"""What a sweep knows of each cell's attempts, and the writes that change it: the tracking store's runs and
the results directory. The driver is the only writer; this is its book-keeping.

Order of writes for a finished attempt: its files are staged (fsynced), swapped into ``cells/<key>/`` whole,
logged to its MLflow run, and only then is the run marked ``done``; ``summary.parquet`` is rebuilt last. The
results on disk come first so that a tracking store that stops answering loses nothing measured: a cell whose
directory is in place but whose run never heard ``done`` is logged by the next run of the sweep (``catch_up``),
not run again. A crash before the swap leaves the cell not done, and the next run does it again; a full disk
while staging leaves nothing staged, and the sweep stops (``runtime.stops``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from orchestrator.cell.spec import CellSpec
from orchestrator.records.cell import CellOutcome, CellStatus
from orchestrator.records.prediction import Prediction
from orchestrator.records.row import Attempt, SummaryRow, attempt_tags
from orchestrator.records.slo import Slo
from orchestrator.records.summary import CellSummary, summarize
from orchestrator.sweep.runtime.results import SweepResults
from orchestrator.sweep.runtime.stops import DiskFull, SweepStopped, stop_if_disk_full
from orchestrator.sweep.runtime.tracking import CellRun, SweepTracker


@dataclass(frozen=True)
class StartedAttempt:
    cell: CellSpec
    number: int  # the cell's attempt number over every run of the sweep (the tracking store's count)
    run_id: str


class CellLedger:
    def __init__(self, sweep: str, tracker: SweepTracker, results: SweepResults, package_versions: dict[str, str],
                 slo: Slo | None = None, predictions: Mapping[str, Prediction] | None = None):  # fmt: skip
        self.sweep = sweep
        self.slo = slo
        self.predictions = predictions or {}  # by cell key: what the simulator said of a cell before it was measured
        self.tracker = tracker
        self.results = results
        self._package_versions = package_versions
        self._history: dict[str, list[CellRun]] = tracker.cell_runs()

    def catch_up(self) -> list[str]:
        """Log the cells a previous run of the sweep put on disk but could not mark ``done`` (its tracking store
        stopped answering, or it died in between): their runs get the files, metrics and ``done``; they are not
        run again. The keys caught up."""
        caught_up = []
        for key in self.results.published_keys():
            row = self.results.done_row(key)
            if run := awaiting_tracking(self._history.get(key, []), row):
                directory = self.results.files.cell(key).directory
                self._track_done(run, self.results.done_summary(key), attempt_tags(row), directory)
                caught_up.append(key)
        return caught_up

    def retire_stale_runs(self) -> None:
        """Attempts still ``running`` belong to a driver that died (the sweep's lock says none is alive); so do runs
        whose status tag says they ended but which MLflow still has running (it died between the two writes): those
        are ended with the run status their tag maps to."""
        self.tracker.end_runs_left_open()
        for runs in self._history.values():
            for run in list(runs):
                if run.status is CellStatus.RUNNING:
                    self.tracker.set_status(run.run_id, CellStatus.INTERRUPTED, "the driver exited before the cell finished")
                    self._remember(run, CellStatus.INTERRUPTED)

    def is_done(self, cell_key: str) -> bool:
        """A cell is done when a run says so and its files are in place (a user may have deleted them)."""
        return is_done(self._history.get(cell_key, []), self.results, cell_key)

    def last_status(self, cell_key: str) -> CellStatus | None:
        runs = self._history.get(cell_key)
        if runs and _has_done(runs):
            return CellStatus.DONE
        return runs[-1].status if runs else None

    def has_run(self, cell_key: str) -> bool:
        return bool(self._history.get(cell_key))

    def start(self, cell: CellSpec, slot_name: str, tags: dict[str, str]) -> StartedAttempt:
        number = max((run.attempt for run in self._history.get(cell.key, [])), default=0) + 1
        run_id = self.tracker.start_cell(cell, number, slot_name, tags)
        started = StartedAttempt(cell, number, run_id)
        self._remember(CellRun(run_id, cell.key, CellStatus.RUNNING, number), CellStatus.RUNNING)
        return started

    def record(self, started: StartedAttempt, outcome: CellOutcome) -> SummaryRow:
        """Every file and tracking entry of a finished attempt, ``done`` last; the attempt's summary row."""
        cell = started.cell
        summary = (summarize(outcome.requests, outcome.jobs, outcome.scheduler_trace, self.slo, cell.jps,
                             self.predictions.get(cell.key)) if outcome.status.is_done else None)  # fmt: skip
        attempt = Attempt(started.run_id, started.number, outcome.started_unix, outcome.finished_unix, outcome.config)
        row = SummaryRow.of(self.sweep, cell.summary_columns(), outcome.status, summary, attempt)
        staged = self._stage(started, outcome, summary, row)
        run = CellRun(started.run_id, cell.key, CellStatus.RUNNING, started.number)
        if outcome.status.is_done:
            self.results.publish(cell.key, staged)
            self._track_done(run, summary, attempt_tags(row), self.results.files.cell(cell.key).directory)
            return row
        try:
            self.tracker.record_outcome(started.run_id, None, attempt_tags(row) | self._package_versions, staged)
        finally:
            self.results.discard(staged)
        self.tracker.set_status(started.run_id, outcome.status, outcome.reason, outcome.failure_kind)
        self._remember(run, outcome.status)
        return row

    def _stage(self, started: StartedAttempt, outcome: CellOutcome, summary: CellSummary | None, row: SummaryRow):
        """The attempt's files staged; on a full disk nothing stays staged, the attempt is tracked as interrupted
        where the store still takes it, and the sweep stops."""
        try:
            with stop_if_disk_full(self.results.sweep_dir, f"writing the files of {started.cell.label}"):
                return self.results.stage(outcome, summary, row)
        except DiskFull:
            try:
                self.interrupt(started, "its files could not be written: the results disk is full")
            except SweepStopped:
                pass  # the store is on that disk too: the next run of the sweep retires the attempt
            raise

    def _track_done(self, run: CellRun, summary: CellSummary | None, tags: dict[str, str], directory) -> None:
        """A done attempt whose directory is in place: its metrics, tags and files on its run, any earlier done run
        of the cell superseded, then ``done``."""
        self.tracker.record_outcome(run.run_id, summary, tags | self._package_versions, directory)
        for previous in self._history.get(run.cell_key, []):
            if previous.status is CellStatus.DONE and previous.run_id != run.run_id:
                self.tracker.set_status(previous.run_id, CellStatus.SUPERSEDED, f"replaced by run {run.run_id}")
                self._remember(previous, CellStatus.SUPERSEDED)
        self.tracker.set_status(run.run_id, CellStatus.DONE)
        self._remember(run, CellStatus.DONE)

    def interrupt(self, started: StartedAttempt, reason: str) -> None:
        self.tracker.set_status(started.run_id, CellStatus.INTERRUPTED, reason)
        self._remember(CellRun(started.run_id, started.cell.key, CellStatus.INTERRUPTED, started.number),
                       CellStatus.INTERRUPTED)  # fmt: skip

    def write_summary(self, cells: list[CellSpec], pending_reason: Callable[[CellSpec], str | None]) -> None:
        """``summary.parquet``: each done cell's own row, and a status row for every other cell of the grid
        (``pending_reason`` says why a cell cannot run in this cluster, or None if it can: a cell that cannot
        is pending with that reason, whatever its earlier attempts ended as)."""
        rows, seen = [], set()
        for key, runs in self._history.items():  # done on disk counts, if its tracking was cut short too
            if (row := self.results.done_row(key)) and (_has_done(runs) or awaiting_tracking(runs, row)):
                rows.append(row)
                seen.add(key)
        for cell in cells:
            if cell.key in seen:
                continue
            runs, reason = self._history.get(cell.key), pending_reason(cell)
            if reason is not None:  # never run here, or its type's nodes went (a lost node) and none came back
                rows.append(SummaryRow.of(self.sweep, cell.summary_columns(), CellStatus.PENDING, reason=reason))
            else:
                rows.append(SummaryRow.of(self.sweep, cell.summary_columns(), runs[-1].status if runs else CellStatus.NOT_RUN))
        with stop_if_disk_full(self.results.sweep_dir, "writing summary.parquet"):
            self.results.write_summary(rows)

    def _remember(self, run: CellRun, status: CellStatus) -> None:
        """Record ``status`` for a tracked run in the in-memory history."""
        runs = self._history.setdefault(run.cell_key, [])
        runs[:] = sorted([r for r in runs if r.run_id != run.run_id] + [replace(run, status=status)], key=lambda r: r.attempt)


def awaiting_tracking(runs: list[CellRun], row: SummaryRow | None) -> CellRun | None:
    """The run whose attempt put the cell's directory in place (its ``row``) but never heard ``done``, if that is
    so (not a run the store does not know: that cell runs again)."""
    run = next((run for run in runs if row is not None and run.run_id == row.run_id), None)
    return run if run is not None and run.status in (CellStatus.RUNNING, CellStatus.INTERRUPTED) else None


def is_done(runs: list[CellRun], results: SweepResults, cell_key: str) -> bool:
    return _has_done(runs) and results.done_row(cell_key) is not None


def _has_done(runs: list[CellRun]) -> bool:
    return any(run.status is CellStatus.DONE for run in runs)
