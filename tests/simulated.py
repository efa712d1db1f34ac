"""A simulated sweep's result files written from this process, for the tests of what reads them (benchmarks,
analysis): every cell run by a ``CellWorker`` here and its files written by the driver's own ``SweepResults``,
as the driver writes them, without Ray or the tracking store (``tests/sweep/test_sim_sweep.py`` runs simulated
sweeps through both, end to end)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.analysis.report import build_report
from orchestrator.cell.spec import EngineKind
from orchestrator.records.layout import SweepFiles
from orchestrator.records.row import Attempt, SummaryRow
from orchestrator.records.summary import summarize
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import RunLimits, SweepSpec
from orchestrator.sweep.runtime.results import SweepResults
from orchestrator.sweep.runtime.worker import CellWorker


def simulated_sweep(spec: SweepSpec, results_dir: Path, report: bool = False) -> SweepFiles:
    """Every cell of ``spec`` (a simulated sweep) done, its files and ``summary.parquet`` written under
    ``results_dir``; with ``report``, its report too (the verdicts)."""
    assert spec.engine is EngineKind.SIM, f"{spec.name} is not a simulated sweep"
    results = SweepResults(results_dir / spec.name)
    worker = CellWorker(node_id="in-process")
    rows = []
    try:
        for number, cell in enumerate(expand(spec), start=1):
            outcome = worker.run(cell, RunLimits())
            assert outcome.status.is_done, f"{cell.label}: {outcome.reason}"
            summary = summarize(outcome.requests, outcome.jobs, outcome.scheduler_trace)
            attempt = Attempt(f"in-process-{number}", 1, outcome.started_unix, outcome.finished_unix, outcome.config)
            row = SummaryRow.of(spec.name, cell.summary_columns(), outcome.status, summary, attempt)
            results.publish(cell.key, results.stage(outcome, summary, row))
            rows.append(row)
    finally:
        worker.shutdown()
    results.write_summary(rows)
    if report:
        build_report(results.sweep_dir)
    return results.files
