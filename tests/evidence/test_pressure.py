"""The pressure plan: the sizing puts its cells inside the offload window, what a cell showed is read the same way from
the simulator and the engine, margins against fcfs are paired over the same jobs, and a recorded GPU run reads back
beside its committed predictions."""

from __future__ import annotations

import json
from functools import cache

import pytest

from orchestrator.cli.pressure import comparison_markdown, comparison_rows, main, rms_errors
from orchestrator.evidence.checks import cell_evidence
from orchestrator.evidence.pressure import (
    POOL_ABOVE_LIVE,
    POOL_BELOW_CORPUS,
    PRESSURE_POLICIES,
    TIER_CORPORA,
    CellFacts,
    cell_facts,
    margins,
    pressure_cells,
    pressure_point,
    simulated,
    winner,
)
from orchestrator.evidence.run import verdict_stage
from orchestrator.models.arch import load_model
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.models.served import Weights
from orchestrator.paths import PROJECT_ROOT
from orchestrator.sizing.kv import Regime, kv_bytes_per_token
from orchestrator.sweep.planning.preflight import preflight
from orchestrator.sweep.planning.spec import RunLimits
from orchestrator.sweep.runtime.worker import CellWorker
from orchestrator.units import GIB

GPU_RUNS = PROJECT_ROOT / "docs" / "gpu-runs"
PREDICTIONS = GPU_RUNS / "2026-11-27-pressure-predictions.json"
H100_RUN = GPU_RUNS / "2026-11-27-H100" / "call-1" / "evidence.json"


@pytest.mark.parametrize("gpu", ["H100", "H200"])
def test_the_sizing_puts_every_cell_of_the_plan_inside_the_offload_window_with_room_both_ways(gpu):
    point = pressure_point(gpu, LLAMA_8B)
    assert point.offered_load < 1 and point.live_tokens * POOL_ABOVE_LIVE <= point.pool_tokens
    assert point.max_num_seqs == 128 and pressure_point(gpu, LLAMA_8B, window_s=60).max_num_seqs is None  # 108 jobs
    assert point.pool_tokens <= point.corpus_tokens / POOL_BELOW_CORPUS
    tier_tokens = point.dram_gb * GIB / kv_bytes_per_token(load_model(LLAMA_8B), 2)
    assert TIER_CORPORA * point.corpus_tokens <= tier_tokens < 2 * TIER_CORPORA * point.corpus_tokens
    cells = pressure_cells(point, PRESSURE_POLICIES, LLAMA_8B, Weights.DUMMY)
    assert [cell.policy for cell in cells] == list(PRESSURE_POLICIES)
    assert {preflight(cell).regime for cell in cells} == {Regime.OFFLOAD_WINDOW}
    assert {cell.dram_gb for cell in cells if cell.policy in ("lmcache", "native-offload")} == {point.dram_gb}
    assert {cell.dram_gb for cell in cells if cell.policy in ("fcfs", "continuum")} == {0.0}


def test_a_gpu_whose_window_cannot_hold_a_longest_request_has_no_point_and_says_why():
    with pytest.raises(ValueError, match=r"^no pressure point on A100: the offload window at 0.5 JPS .* 16384-token"):
        pressure_point("A100", LLAMA_8B)
    with pytest.raises(ValueError, match=r"^no pressure point for 'cpu': the sizing needs a GPU type"):
        pressure_point("cpu", LLAMA_8B)


@cache
def _simulated_plan() -> dict:
    cells = pressure_cells(pressure_point("H100", LLAMA_8B), PRESSURE_POLICIES, LLAMA_8B, Weights.DUMMY)
    worker = CellWorker()
    return {cell.policy: (cell, worker.run(simulated(cell), RunLimits())) for cell in cells}


def test_a_simulated_tier_counts_its_lookups_and_hits_in_tokens_as_vllm_does():
    cell, outcome = _simulated_plan()["native-offload"]
    facts = cell_facts(cell, outcome)
    counters = outcome.config.tier_counters
    per_token = kv_bytes_per_token(load_model(LLAMA_8B), 2)
    assert facts.tier_hit_tokens == pytest.approx(counters.kv_offload_load_bytes / per_token)
    assert 0 < facts.tier_hit_tokens <= facts.tier_looked_up_tokens <= facts.prompt_tokens
    assert facts.tier_stored_tokens == pytest.approx(counters.kv_offload_store_bytes / per_token)
    assert facts.gpu_hit_tokens + facts.tier_hit_tokens <= facts.prompt_tokens
    fcfs = cell_facts(*_simulated_plan()["fcfs"])
    assert fcfs.tier_hit_tokens is None and fcfs.tier_served_share is None and fcfs.completed == fcfs.jobs > 0


def test_margins_are_paired_over_the_same_jobs_and_the_winner_is_the_fastest_that_finished():
    plan = _simulated_plan()
    outcomes = {policy: outcome for policy, (_, outcome) in plan.items()}
    facts = {policy: cell_facts(cell, outcome) for policy, (cell, outcome) in plan.items()}
    found = {margin.policy: margin for margin in margins(outcomes, facts)}
    assert set(found) == set(PRESSURE_POLICIES) - {"fcfs"}
    native = found["native-offload"]
    assert native.measured.lo > 0 and native.measured.estimate == pytest.approx(native.predicted_pct)
    itself = margins({"fcfs": outcomes["fcfs"], "again": outcomes["fcfs"]}, {})[0]
    assert (itself.measured.estimate, itself.measured.lo, itself.measured.hi, itself.predicted_pct) == (0, 0, 0, None)
    fastest = min(facts, key=lambda policy: facts[policy].jct_mean_s)
    assert winner(facts) == fastest
    unfinished = facts | {fastest: CellFacts.of_dict(facts[fastest].as_dict() | {"completed": 0})}
    assert winner(unfinished) != fastest


def test_the_recorded_h100_run_reads_back_beside_its_committed_predictions():
    predicted, evidence = json.loads(PREDICTIONS.read_text()), json.loads(H100_RUN.read_text())
    plan, rows = comparison_rows(predicted, evidence)
    assert plan["gpu"] == "H100" and [row.policy for row in rows] == list(PRESSURE_POLICIES)
    for row in rows:  # each error is the prediction against the measurement the run recorded
        assert row.error("jct_mean_s") == pytest.approx(row.predicted["jct_mean_s"] / row.measured["jct_mean_s"] - 1)
    page = comparison_markdown(predicted, evidence)
    assert "| native-offload | 9.63 s / 9.55 s (+1%; ±" in page
    # judged against the band committed with the prediction (15%), not the one its own error widened since
    assert "| lmcache | 10.00 s / 11.90 s (-16%; ±15%)" in page
    assert "- lmcache: mean JCT error -16% against a band of ±15%: outside" in page
    assert "- winner among these: measured native-offload, predicted native-offload: matched" in page
    errors = rms_errors(rows)
    assert errors["native-offload"] == pytest.approx(abs(9.63 / 9.55 - 1), abs=1e-3)


def test_a_comparison_for_another_gpu_type_or_a_missing_file_is_one_line(tmp_path, capsys):
    h200 = json.loads(H100_RUN.read_text())
    h200["header"]["target"] = "L40S"
    (tmp_path / "evidence.json").write_text(json.dumps(h200))
    assert main(["compare", str(PREDICTIONS), str(tmp_path / "evidence.json")]) == 2
    assert capsys.readouterr().err == "error: the evidence ran on 'L40S'; the predictions are for H100, H200\n"
    assert main(["compare", str(PREDICTIONS), str(tmp_path / "none.json")]) == 2
    assert capsys.readouterr().err == f"error: no file {tmp_path / 'none.json'}\n"


def test_fcfs_losing_its_prefixes_does_its_job_where_the_pool_overflows_and_fails_where_everything_fits():
    cell, outcome = _simulated_plan()["fcfs"]
    kept = cell_facts(cell, outcome).gpu_hit_share
    assert 0 < kept < 0.5  # the plan's fcfs recomputes most of what it evicted
    overflowing = _fcfs_check(cell, outcome)
    assert overflowing.ok and overflowing.detail.endswith("(the pool overflows here: what it evicted was recomputed)")
    roomy = cell.model_copy(update={"engine_options": cell.engine_options.model_copy(update={"num_kv_blocks": None})})
    assert preflight(roomy).regime is Regime.FITS_ON_GPU and _fcfs_check(roomy, outcome).ok is False


def _fcfs_check(cell, outcome):
    checks = cell_evidence("H100", cell, outcome, reset="clean", reset_error=None)
    return next(check for check in checks if check.name == "fcfs did its job")


def test_the_verdict_stage_holds_every_policy_against_fcfs_and_names_both_winners():
    plan = _simulated_plan()
    measured = {policy: (cell_facts(cell, outcome), outcome) for policy, (cell, outcome) in plan.items()}
    predicted = {policy: facts for policy, (facts, _) in measured.items()}
    verdict = verdict_stage(measured, predicted)
    assert verdict.name == "pressure verdict" and verdict.status == "done"
    assert set(verdict.facts) == set(PRESSURE_POLICIES) - {"fcfs"} | {"winner"}
    native = verdict.facts["native-offload"]
    assert native["margin_lo_pct"] <= native["margin_pct"] <= native["margin_hi_pct"]
    assert native["margin_pct"] == pytest.approx(native["predicted_margin_pct"])  # the same outcomes both ways
    assert verdict.facts["winner"] == {"measured": winner(predicted), "predicted": winner(predicted)}
    assert f"native-offload vs fcfs: {native['margin_pct']:+.1f}%" in verdict.table
