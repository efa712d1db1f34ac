"""One real cell on the CPU vLLM engine: the workload contract holds against the real server."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.cell_runner import CellResult, run_cell
from orchestrator.policies import get_policy
from orchestrator.records.store import JOBS_FILE, REQUESTS_FILE
from orchestrator.replica.vllm_server import VllmEngineConfig
from orchestrator.workload.client import RequestOptions
from orchestrator.workload.plan import WorkloadPlan, build_plan
from orchestrator.workload.spec import WorkloadSpec
from tests.processes import vllm_processes

pytestmark = pytest.mark.engine


@dataclass(frozen=True)
class LowLoadCell:
    plan: WorkloadPlan
    result: CellResult
    out: Path
    vllm_pids_before: frozenset[int]


@pytest.fixture(scope="module")
def cell(local_ray, tiny_model_dir, tiny_counter, tmp_path_factory) -> LowLoadCell:
    before = frozenset(pid for pid, _ in vllm_processes())
    plan = build_plan(WorkloadSpec(jps=1, duration_s=10, scale=0.25, seed=42), tiny_counter)
    base = VllmEngineConfig(model=str(tiny_model_dir), served_model_name="tiny", num_kv_blocks=2400)
    engine = get_policy("fcfs").engine_config(base, dram_gb=0)
    out = tmp_path_factory.mktemp("cell")
    result = run_cell(engine, plan, out, RequestOptions(model="tiny"), num_client_actors=2)
    return LowLoadCell(plan, result, out, before)


def test_every_job_completes_eight_turns_of_twenty_tokens(cell):
    assert len(cell.result.jobs) == len(cell.plan.jobs) >= 5
    assert all(job.status.is_completed and job.num_turns_completed == 8 for job in cell.result.jobs)
    assert len(cell.result.requests) == 8 * len(cell.plan.jobs)
    assert all(record.completion_tokens == 20 for record in cell.result.requests)


def test_measured_prompt_tokens_are_within_two_percent_of_target(cell):
    for record in cell.result.requests:
        assert abs(record.prompt_tokens - record.target_prompt_tokens) <= 0.02 * record.target_prompt_tokens, record


def test_prefix_cache_keeps_ninety_percent_of_the_best_on_turns_three_to_eight(cell):
    for turn in range(3, 9):
        assert cell.result.summary.turn(turn).cached_of_best >= 0.9, cell.result.summary.turn(turn)


def test_records_trace_and_effective_config_are_written(cell):
    requests = pd.read_parquet(cell.out / REQUESTS_FILE)
    jobs = pd.read_parquet(cell.out / JOBS_FILE)
    assert len(requests) == 8 * len(cell.plan.jobs) and len(jobs) == len(cell.plan.jobs)
    assert cell.result.engine_facts.num_kv_blocks == 2400 and cell.result.engine_facts.block_size == 32
    assert (cell.out / "server.log").stat().st_size > 0
    trace = pd.read_json(cell.out / "scheduler_trace.jsonl", lines=True)
    finishes = trace[trace["kind"] == "finish"]
    assert len(finishes) == len(requests) and set(finishes["action"]) == {"free"}
    assert (trace[trace["kind"] == "step"]["pinned_blocks"] == 0).all()


def test_no_vllm_process_is_left_afterwards(cell):
    assert [p for p in vllm_processes() if p[0] not in cell.vllm_pids_before] == []
