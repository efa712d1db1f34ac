"""The source study's H200 cells in the simulator, judged by the verdicts: at 1 JPS nothing is evicted and
the policies tie; at 15 JPS Continuum wins beyond every uncertainty, the simulator's own error included.
Both with one trial and with three."""

from __future__ import annotations

import pandas as pd
import pytest

from orchestrator.analysis.verdicts import CellRecords, censored_job_times, verdicts
from orchestrator.cell.spec import EngineKind
from orchestrator.records.row import Attempt, SummaryRow
from orchestrator.records.store import records_frame
from orchestrator.records.summary import summarize
from orchestrator.sim.error_bands import load_errors
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import RunLimits
from orchestrator.sweep.runtime.worker import CellWorker
from orchestrator.sweeps.large_dram import SPEC as LARGE_DRAM


@pytest.fixture(scope="module")
def simulated_h200() -> tuple[pd.DataFrame, dict[str, CellRecords]]:
    """Summary rows and records of the H200 cells at 1 and 15 JPS, three trials each."""
    spec = LARGE_DRAM.model_copy(update={"engine": EngineKind.SIM, "gpus": ("H200",), "jps": (1.0, 15.0), "trials": 3})
    worker = CellWorker(node_id="test")
    rows, jobs = [], {}
    try:
        for cell in expand(spec):
            outcome = worker.run(cell, RunLimits())
            attempt = Attempt("test", 1, outcome.started_unix, outcome.finished_unix, outcome.config)
            summary = summarize(outcome.requests, outcome.jobs)
            rows.append(SummaryRow.of(spec.name, cell.summary_columns(), outcome.status, summary, attempt).to_json())
            jobs[cell.key] = CellRecords(censored_job_times(records_frame(outcome.jobs)), records_frame(outcome.requests))
    finally:
        worker.shutdown()
    return pd.DataFrame(rows), jobs


@pytest.mark.parametrize("num_trials", [1, 3])
def test_the_policies_tie_at_1_jps_and_continuum_wins_significantly_at_15(simulated_h200, num_trials):
    summary, jobs = simulated_h200
    seeds = sorted(summary.seed.unique(), key=lambda seed: seed != 42)[:num_trials]  # the base seed first
    found, per_policy = verdicts(summary[summary.seed.isin(seeds)], jobs.__getitem__, load_errors())
    light, heavy = (next(verdict for verdict in found if verdict.jps == jps) for jps in (1, 15))
    assert light.label == "tie" and not light.significant and {"fcfs", "continuum"} <= set(light.tied_with)
    assert heavy.label == "continuum" and heavy.significant and heavy.margin_lo_pct > 20
    assert {(verdict.num_trials, verdict.engine) for verdict in found} == {(num_trials, "sim")}
    heavy_policies = per_policy[per_policy.jps == 15].set_index("policy")
    assert heavy_policies.completion_pct["continuum"] >= heavy_policies.completion_pct.drop("continuum").max()
    # The tails: the worst TTFT bounds its p99, and Continuum's pins keep the last turn fast in the tail too.
    assert (heavy_policies.ttft_max_s >= heavy_policies.ttft_p99_s).all() and heavy_policies.num_preemptions.notna().all()
    assert heavy_policies.loc["continuum", "T8 p90"] < heavy_policies.drop("continuum")["T8 p90"].min()
