"""A sweep's result files: ``DIR/<sweep>/cells/<cell_key>/`` per cell and ``DIR/<sweep>/summary.parquet``.

An attempt's files are written to a staging directory first (each file fsynced); a done cell's directory is
swapped into place whole, so ``cells/<cell_key>/`` always holds one complete attempt (or nothing): a write that
fails part way (a full disk) leaves nothing staged. ``summary.parquet`` is rebuilt from the done cells'
``summary.json`` files plus one row for every other cell of the grid.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from orchestrator.records.cell import CellOutcome
from orchestrator.records.layout import CellFiles, SweepFiles
from orchestrator.records.row import SummaryRow
from orchestrator.records.store import atomic_write_csv, atomic_write_json, atomic_write_parquet, write_cell_records
from orchestrator.records.summary import CellSummary


def write_attempt_files(files: CellFiles, outcome: CellOutcome, summary: CellSummary | None, row: SummaryRow | None) -> None:
    """Records (when done), summary, effective configuration, server log and scheduler trace of one attempt."""
    files.directory.mkdir(parents=True, exist_ok=True)
    if outcome.status.is_done:
        write_cell_records(files, outcome.requests, outcome.jobs)
        atomic_write_json({"row": row.to_json() if row else None, "turns": [asdict(turn) for turn in summary.turns]},
                          files.summary)  # fmt: skip
    atomic_write_json({**outcome.config.to_json(), "status": outcome.status.value, "reason": outcome.reason}, files.config)
    files.server_log.write_text(outcome.server_log)
    if outcome.scheduler_trace:
        files.scheduler_trace.write_bytes(outcome.scheduler_trace)


class SweepResults:
    """The driver's writes to one sweep's results; it holds the sweep's lock while it writes."""

    def __init__(self, sweep_dir: Path):
        self.files = SweepFiles(Path(sweep_dir).absolute())

    @property
    def sweep_dir(self) -> Path:
        return self.files.directory

    def stage(self, outcome: CellOutcome, summary: CellSummary | None, row: SummaryRow | None) -> Path:
        """Every file of one attempt, in a fresh staging directory (also what goes to MLflow)."""
        staged = self.files.staging / f"{outcome.cell_key}-{uuid.uuid4().hex[:8]}"
        try:
            write_attempt_files(CellFiles(staged), outcome, summary, row)
        except BaseException:
            self.discard(staged)
            raise
        return staged

    def publish(self, cell_key: str, staged: Path) -> None:
        """Make ``staged`` the cell's directory. A crash in between leaves the old or no directory, and
        the cell is not marked done, so the next run redoes it."""
        target = self.files.cell(cell_key).directory
        target.parent.mkdir(parents=True, exist_ok=True)
        retired = None
        if target.exists():
            retired = staged.parent / f"retired-{cell_key}-{uuid.uuid4().hex[:8]}"
            target.rename(retired)
        staged.rename(target)
        if retired is not None:
            shutil.rmtree(retired, ignore_errors=True)

    def clear_staging(self) -> None:
        """Drop what a driver that died mid-write left staged (the caller holds the sweep's lock)."""
        shutil.rmtree(self.files.staging, ignore_errors=True)

    def discard(self, staged: Path) -> None:
        shutil.rmtree(staged, ignore_errors=True)

    def done_row(self, cell_key: str) -> SummaryRow | None:
        """The summary row a done cell wrote, or None if its files are missing."""
        try:
            return SummaryRow.from_json(json.loads(self.files.cell(cell_key).summary.read_text())["row"])
        except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError):
            return None

    def published_keys(self) -> list[str]:
        """The cells whose directory is in place (each holds one complete attempt)."""
        cells = self.files.cells
        return sorted(path.name for path in cells.iterdir() if path.is_dir()) if cells.is_dir() else []

    def done_summary(self, cell_key: str) -> CellSummary:
        """A done cell's summary as its ``summary.json`` holds it (its row's scalars and its turns)."""
        payload = json.loads(self.files.cell(cell_key).summary.read_text())
        return CellSummary.of_parts(payload["row"], payload["turns"])

    def write_preflight(self, frame: pd.DataFrame) -> Path:
        """The preflight of the cells a run is about to run (``planning.preflight.preflight_frame``); its file."""
        atomic_write_csv(frame, self.files.preflight)
        return self.files.preflight

    def write_summary(self, rows: list[SummaryRow]) -> pd.DataFrame:
        frame = pd.DataFrame([row.to_json() for row in rows], columns=SummaryRow.columns())
        frame = frame.sort_values(["gpu", "policy", "dram_gb", "jps", "seed"], ignore_index=True)
        atomic_write_parquet(frame, self.files.summary)
        return frame
