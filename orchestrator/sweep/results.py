"""A sweep's result files: ``DIR/<sweep>/cells/<cell_key>/`` per cell and ``DIR/<sweep>/summary.parquet``.

An attempt's files are written to a staging directory first; a done cell's directory is swapped into
place whole, so ``cells/<cell_key>/`` always holds one complete attempt (or nothing). ``summary.parquet``
is rebuilt from the done cells' ``summary.json`` files plus one row for every other cell of the grid.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from orchestrator.records.store import atomic_write_json, atomic_write_parquet, write_cell_records
from orchestrator.records.summary import CellSummary
from orchestrator.replica.replica import SCHEDULER_TRACE_FILE, SERVER_LOG_FILE
from orchestrator.sweep.cells import CellSpec, CellStatus
from orchestrator.sweep.worker import CellOutcome

SUMMARY_FILE = "summary.parquet"
CELL_SUMMARY_FILE = "summary.json"
CELL_CONFIG_FILE = "cell.json"
# The columns other people's scripts read (BRIEF section 6), first and in this order.
CONTRACT_COLUMNS = (
    "sweep", "cell_key", "engine", "gpu", "policy", "jps", "dram_gb", "status", "n_jobs", "n_completed",
    "n_timeouts", "jct_mean_s", "jct_p50_s", "jct_p90_s", "jct_p99_s", "t1_mean_s", "t8_mean_s",
)  # fmt: skip


def summary_row(sweep: str, cell: CellSpec, status: CellStatus, summary: CellSummary | None = None, **extra) -> dict:
    """One row of ``summary.parquet`` (pure). ``t8_mean_s`` is the last turn's mean latency."""
    t1 = summary.t1_mean_s if summary else None
    t_last = summary.t_last_mean_s if summary else None
    row = {
        "sweep": sweep,
        "cell_key": cell.key,
        "engine": cell.engine.value,
        "gpu": cell.gpu,
        "policy": cell.policy,
        "jps": cell.jps,
        "dram_gb": cell.dram_gb,
        "status": status.value,
        "n_jobs": summary.num_jobs if summary else None,
        "n_completed": summary.num_completed if summary else None,
        "n_timeouts": summary.num_timeouts if summary else None,
        "jct_mean_s": summary.jct_mean_s if summary else None,
        "jct_p50_s": summary.jct_p50_s if summary else None,
        "jct_p90_s": summary.jct_p90_s if summary else None,
        "jct_p99_s": summary.jct_p99_s if summary else None,
        "t1_mean_s": t1,
        "t8_mean_s": t_last,
        "seed": cell.seed,
        "model": cell.model,
        "scale": cell.workload.scale,
        "duration_s": cell.workload.duration_s,
        "tool_time_s": cell.workload.tool_time_s,
        "n_errors": summary.num_errors if summary else None,
        "t8_over_t1": t_last / t1 if t1 and t_last else None,
        "dispatch_lag_p99_ms": summary.dispatch_lag_p99_ms if summary else None,
        "span_s": summary.span_s if summary else None,
    }
    row.update(extra)
    return row


def write_attempt_files(directory: Path, outcome: CellOutcome, summary: CellSummary | None, row: dict | None) -> None:
    """Records (when done), summary, effective configuration, server log and scheduler trace of one attempt."""
    directory.mkdir(parents=True, exist_ok=True)
    if outcome.status is CellStatus.DONE:
        write_cell_records(directory, outcome.requests, outcome.jobs)
        atomic_write_json({"row": row, "turns": [asdict(turn) for turn in summary.turns]}, directory / CELL_SUMMARY_FILE)
    atomic_write_json({**outcome.config, "status": outcome.status.value, "reason": outcome.reason}, directory / CELL_CONFIG_FILE)
    (directory / SERVER_LOG_FILE).write_text(outcome.server_log)
    if outcome.scheduler_trace:
        (directory / SCHEDULER_TRACE_FILE).write_bytes(outcome.scheduler_trace)


class SweepResults:
    def __init__(self, sweep_dir: Path):
        self.sweep_dir = Path(sweep_dir).absolute()
        self.cells_dir = self.sweep_dir / "cells"
        self.summary_path = self.sweep_dir / SUMMARY_FILE

    def cell_dir(self, cell_key: str) -> Path:
        return self.cells_dir / cell_key

    def stage(self, outcome: CellOutcome, summary: CellSummary | None, row: dict | None) -> Path:
        """Every file of one attempt, in a fresh staging directory (also what goes to MLflow)."""
        staged = self.sweep_dir / ".staging" / f"{outcome.cell_key}-{uuid.uuid4().hex[:8]}"
        write_attempt_files(staged, outcome, summary, row)
        return staged

    def publish(self, cell_key: str, staged: Path) -> None:
        """Make ``staged`` the cell's directory. A crash in between leaves the old or no directory, and
        the cell is not marked done, so the next run redoes it."""
        target = self.cell_dir(cell_key)
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
        shutil.rmtree(self.sweep_dir / ".staging", ignore_errors=True)

    def discard(self, staged: Path) -> None:
        shutil.rmtree(staged, ignore_errors=True)

    def done_row(self, cell_key: str) -> dict | None:
        """The summary row a done cell wrote, or None if its files are missing."""
        try:
            return json.loads((self.cell_dir(cell_key) / CELL_SUMMARY_FILE).read_text())["row"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return None

    def write_summary(self, rows: list[dict]) -> pd.DataFrame:
        frame = pd.DataFrame(rows)
        if frame.empty:
            frame = pd.DataFrame(columns=list(CONTRACT_COLUMNS))
            atomic_write_parquet(frame, self.summary_path)
            return frame
        ordered = list(CONTRACT_COLUMNS) + [column for column in frame.columns if column not in CONTRACT_COLUMNS]
        frame = frame[ordered].sort_values(["gpu", "policy", "dram_gb", "jps", "seed"], ignore_index=True)
        atomic_write_parquet(frame, self.summary_path)
        return frame
