"""The summary row and the cell configuration: one name per quantity, BRIEF section 6's columns first,
older summary.json files still readable, and cell.json in the shape other tools read."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from orchestrator.cell.cell_json import cell_config
from orchestrator.records.cell import (
    CellConfig,
    CellOutcome,
    CellStatus,
    EngineFacts,
    FailureKind,
    RequestOptions,
    ResetProof,
    ScheduleStats,
    TierCounters,
)
from orchestrator.cell.spec import EngineKind
from orchestrator.records.row import Attempt, SummaryRow, attempt_columns, attempt_tags
from orchestrator.records.schema import JobRecord, JobStatus, RequestRecord, RequestStatus
from orchestrator.records.summary import summarize
from orchestrator.replica.config import VllmEngineConfig
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.workload.spec import WorkloadSpec

BRIEF_COLUMNS = ["sweep", "cell_key", "engine", "gpu", "policy", "jps", "dram_gb", "status", "num_jobs", "num_completed",
                 "num_timeouts", "jct_mean_s", "jct_p50_s", "jct_p90_s", "jct_p99_s", "t1_mean_s", "t_last_mean_s"]  # fmt: skip
CELL = expand(SweepSpec(name="s", engine=EngineKind.SIM, gpus=("H100",), policies=("lmcache",), jps=(2,),
                        dram_gb=(64,), model="meta-llama/Llama-3.1-8B-Instruct", workload=WorkloadSpec(jps=1)))[0]  # fmt: skip


def _request(job: str, turn: int, finished_at: float) -> RequestRecord:
    return RequestRecord(job_id=job, job_index=0, turn=turn, is_last=turn == 3, status=RequestStatus.OK,
                         scheduled_at=turn - 1.0, sent_at=turn - 1.0, first_token_at=finished_at - 0.1,
                         finished_at=finished_at, target_prompt_tokens=100 * turn, prompt_tokens=100 * turn,
                         cached_tokens=0, best_cached_tokens=0, completion_tokens=20, error=None)  # fmt: skip


def _summary():
    requests = [_request("a", 1, 0.5), _request("a", 2, 1.5), _request("a", 3, 3.0)]
    jobs = [JobRecord("a", 0, JobStatus.COMPLETED, 0.0, 3.0, 3)]
    return summarize(requests, jobs)


def _config() -> CellConfig:
    return CellConfig(
        cell_key=CELL.key, cell=CELL, node_id="n1", host="h",
        engine_facts=EngineFacts("0.32.0", 16, 1000, 16000, "NVIDIA H100 80GB HBM3"),
        tier_counters=TierCounters.between({"vllm:kv_offload_store_bytes_total": 1.0},
                                           {"vllm:kv_offload_store_bytes_total": 3.0, "vllm:num_preemptions_total": 9.0}),
        replica_reused=True, reset_proof=ResetProof(320, 0, 0.0),
        engine=VllmEngineConfig(model="/models/llama", load_format="dummy", device="gpu", block_size=16),
        request_options=RequestOptions("model", send_priority=True, answer_token_ids=(5, 7)),
        schedule_stats=ScheduleStats(3, 24, 8.0, 8, 12000.0, 20.0, 0.5),
    )  # fmt: skip


def test_the_contract_columns_come_first_and_the_last_turn_has_one_name():
    assert SummaryRow.columns()[: len(BRIEF_COLUMNS)] == BRIEF_COLUMNS
    assert not [name for name in SummaryRow.columns() if "t8" in name]


def test_a_done_row_carries_the_summary_under_its_own_names_and_the_attempt_facts():
    summary = _summary()
    attempt = Attempt("run1", 2, 100.0, 130.0, _config())
    row = SummaryRow.of("s", CELL.summary_columns(), CellStatus.DONE, summary, attempt)
    assert (row.num_jobs, row.num_completed, row.jct_mean_s) == (1, 1, 3.0)
    assert row.t1_mean_s == pytest.approx(0.5) and row.t_last_mean_s == pytest.approx(1.0)
    assert row.t_last_over_t1 == pytest.approx(2.0) == summary.t_last_over_t1
    assert (row.run_id, row.attempt, row.wall_s, row.node_id) == ("run1", 2, 30.0, "n1")
    assert row.device_name == "NVIDIA H100 80GB HBM3" and row.vllm_version == "0.32.0" and row.replica_reused
    assert row.kv_offload_store_bytes == 2.0 and row.kv_offload_load_bytes is None
    assert row.stack_vllm is None  # a simulated cell ran on no serving stack
    assert set(attempt_columns(attempt)) <= set(SummaryRow.columns())


def test_a_row_round_trips_through_json_and_an_older_row_is_read_under_the_new_names():
    row = SummaryRow.of("s", CELL.summary_columns(), CellStatus.DONE, _summary())
    assert SummaryRow.from_json(json.loads(json.dumps(row.to_json()))) == row
    older = {key.replace("num_", "n_", 1): value for key, value in row.to_json().items() if not key.startswith("t_last")}
    older |= {"t8_mean_s": 1.0, "t8_over_t1": 2.0, "a_column_since_dropped": 1}
    assert "n_completed" in older and "num_completed" not in older
    read = SummaryRow.from_json(older)
    assert (read.t_last_mean_s, read.t_last_over_t1) == (1.0, 2.0)
    assert (read.num_jobs, read.num_completed, read.num_timeouts) == (row.num_jobs, row.num_completed, row.num_timeouts)


def test_a_pending_row_says_why_and_has_no_numbers():
    row = SummaryRow.of("s", CELL.summary_columns(), CellStatus.PENDING, reason="no H100 in the cluster")
    assert row.status == "pending" and row.reason == "no H100 in the cluster" and row.num_jobs is None and row.run_id is None


def test_cell_json_keeps_its_shape_with_only_the_tier_counters_the_engine_has():
    written = json.loads(json.dumps(_config().to_json() | {"status": "done", "reason": None}))
    assert written["tier_counters"] == {"kv_offload_store_bytes": 2.0}
    assert written["engine_facts"]["block_size"] == 16 and written["reset_proof"]["cached_before"] == 320
    assert written["cell"]["policy"] == "lmcache" and written["replica_reused"] is True
    assert written["engine"]["load_format"] == "dummy" and written["request_options"]["answer_token_ids"] == [5, 7]
    assert written["schedule_stats"]["num_requests"] == 24
    read = cell_config(written)
    assert read == _config() and read.cell.workload.jps == 2 and read.engine.block_size == 16


def test_a_cell_json_with_the_older_names_of_its_counts_reads_the_same():
    written = json.loads(json.dumps(replace(_config(), num_preemptions=4, num_evicted_blocks=7).to_json()))
    written["n_preemptions"], written["n_evicted_blocks"] = written.pop("num_preemptions"), written.pop("num_evicted_blocks")
    read = cell_config(written)
    assert (read.num_preemptions, read.num_evicted_blocks) == (4, 7)


def test_a_failure_outcome_has_no_records_and_names_its_node():
    outcome = CellOutcome.failure(CELL, FailureKind.REPLICA_START, "replica did not start", True, "n2", 5.0)
    assert outcome.status is CellStatus.FAILED and not outcome.requests and outcome.retryable
    assert outcome.config.node_id == "n2" and outcome.config.cell_key == CELL.key and outcome.finished_unix >= 5.0


def test_a_done_rows_tags_are_its_attempts_run_facts():
    """What a re-run logs to MLflow for a cell it finds on disk: the same tags as the attempt logged itself."""
    attempt = Attempt("run1", 2, 100.0, 130.0, _config())
    row = SummaryRow.of("s", CELL.summary_columns(), CellStatus.DONE, _summary(), attempt)
    facts = {key: str(value) for key, value in attempt_columns(attempt).items() if value is not None and key != "run_id"}
    assert attempt_tags(row) == facts and "node_id" in facts
