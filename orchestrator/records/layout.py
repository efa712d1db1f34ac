"""The results layout (BRIEF section 6): every file and folder name of a sweep's results, written once.

    DIR/<sweep>/summary.parquet            one row per cell of the grid (``records.row.SummaryRow``)
    DIR/<sweep>/cells/<cell_key>/          one complete attempt of a done cell:
        requests.parquet, jobs.parquet     raw records (``records.schema``)
        summary.json                       the cell's summary row and per-turn statistics
        cell.json                          what the cell asked for and what took effect (``records.cell``)
        server.log                         the replica's log
        scheduler_trace.parquet            the scheduler trace (``records.scheduler_trace_file``)
    DIR/<sweep>/report/                    the HTML report, and its tables/ (verdicts.csv among them)
    DIR/<sweep>/crossover.csv              the loads where a verdict changes (sweeps/crossover.py)
    DIR/<sweep>/capacity.csv               each policy's highest load within an SLO (sweeps/capacity.py) ...
    DIR/<sweep>/fleet.csv                  ... and the replicas a target traffic needs
    DIR/<sweep>/preflight.csv              each cell to run's preflight regime and its reasons
    DIR/<sweep>/predictions.csv            a budgeted sweep's prediction of each real cell (``records.prediction``) ...
    DIR/<sweep>/budget_plan.csv            ... and its order, each cell's cost and whether the budget covers it

Writers (the driver, the worker's replica) and readers (analysis) take their paths from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SUMMARY_FILE = "summary.parquet"
CELLS_DIR = "cells"
REPORT_DIR = "report"
REPORT_TABLES_DIR = "tables"
VERDICTS_FILE = "verdicts.csv"
CROSSOVER_FILE = "crossover.csv"
CAPACITY_FILE = "capacity.csv"
PREDICTIONS_FILE = "predictions.csv"
BUDGET_PLAN_FILE = "budget_plan.csv"
FLEET_FILE = "fleet.csv"
PREFLIGHT_FILE = "preflight.csv"
STAGING_DIR = ".staging"
LOCK_FILE = ".lock"

REQUESTS_FILE = "requests.parquet"
JOBS_FILE = "jobs.parquet"
CELL_SUMMARY_FILE = "summary.json"
CELL_CONFIG_FILE = "cell.json"
SERVER_LOG_FILE = "server.log"
SCHEDULER_TRACE_FILE = "scheduler_trace.parquet"
LEGACY_SCHEDULER_TRACE_FILE = "scheduler_trace.jsonl"  # results written before the parquet trace
PLUGIN_TRACE_FILE = "scheduler_trace.jsonl"  # what the vLLM plugin writes in the replica's work folder


@dataclass(frozen=True)
class CellFiles:
    """The files of one cell attempt, in ``directory`` (a done cell's folder or a staging folder)."""

    directory: Path

    @property
    def requests(self) -> Path:
        return self.directory / REQUESTS_FILE

    @property
    def jobs(self) -> Path:
        return self.directory / JOBS_FILE

    @property
    def summary(self) -> Path:
        return self.directory / CELL_SUMMARY_FILE

    @property
    def config(self) -> Path:
        return self.directory / CELL_CONFIG_FILE

    @property
    def server_log(self) -> Path:
        return self.directory / SERVER_LOG_FILE

    @property
    def scheduler_trace(self) -> Path:
        return self.directory / SCHEDULER_TRACE_FILE

    def trace_to_read(self) -> Path | None:
        """The cell's trace file as written: the parquet one, or an older result's JSON lines; None if neither."""
        for path in (self.scheduler_trace, self.directory / LEGACY_SCHEDULER_TRACE_FILE):
            if path.exists() and path.stat().st_size:
                return path
        return None


@dataclass(frozen=True)
class SweepFiles:
    """The folders and files of one sweep's results, ``DIR/<sweep>``."""

    directory: Path

    @property
    def summary(self) -> Path:
        return self.directory / SUMMARY_FILE

    @property
    def cells(self) -> Path:
        return self.directory / CELLS_DIR

    @property
    def report(self) -> Path:
        return self.directory / REPORT_DIR

    @property
    def verdicts(self) -> Path:
        return self.report / REPORT_TABLES_DIR / VERDICTS_FILE

    @property
    def crossover(self) -> Path:
        return self.directory / CROSSOVER_FILE

    @property
    def capacity(self) -> Path:
        return self.directory / CAPACITY_FILE

    @property
    def fleet(self) -> Path:
        return self.directory / FLEET_FILE

    @property
    def preflight(self) -> Path:
        return self.directory / PREFLIGHT_FILE

    @property
    def predictions(self) -> Path:
        return self.directory / PREDICTIONS_FILE

    @property
    def budget_plan(self) -> Path:
        return self.directory / BUDGET_PLAN_FILE

    @property
    def staging(self) -> Path:
        return self.directory / STAGING_DIR

    @property
    def lock(self) -> Path:
        return self.directory / LOCK_FILE

    def cell(self, cell_key: str) -> CellFiles:
        return CellFiles(self.cells / cell_key)
