"""One real cell on the CPU vLLM engine: the workload contract holds against the real server."""

from __future__ import annotations

import pandas as pd
import pytest

from orchestrator.cell_runner import run_cell
from orchestrator.records.store import JOBS_FILE, REQUESTS_FILE
from orchestrator.replica.vllm_server import VllmEngineConfig
from orchestrator.workload.client import RequestOptions
from orchestrator.workload.plan import build_plan
from orchestrator.workload.spec import WorkloadSpec
from tests.processes import vllm_processes

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def low_load_cell(tiny_model_dir, tiny_counter, tmp_path_factory):
    import ray

    assert vllm_processes() == [], "a vLLM process was already running before the test"
    spec = WorkloadSpec(jps=1, duration_s=10, scale=0.25, seed=42)
    plan = build_plan(spec, tiny_counter)
    engine = VllmEngineConfig(model=str(tiny_model_dir), served_model_name="tiny", num_kv_blocks=2400)
    out = tmp_path_factory.mktemp("cell")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result = run_cell(engine, plan, out, RequestOptions(model="tiny"), num_client_actors=2)
    finally:
        ray.shutdown()
    return spec, plan, result, out


def test_every_job_completes_eight_turns_of_twenty_tokens(low_load_cell):
    _, plan, result, _ = low_load_cell
    assert len(result.jobs) == len(plan.jobs) >= 5
    assert all(job.status.is_completed and job.num_turns_completed == 8 for job in result.jobs)
    assert len(result.requests) == 8 * len(plan.jobs)
    assert all(record.completion_tokens == 20 for record in result.requests)


def test_measured_prompt_tokens_are_within_two_percent_of_target(low_load_cell):
    _, _, result, _ = low_load_cell
    for record in result.requests:
        assert abs(record.prompt_tokens - record.target_prompt_tokens) <= 0.02 * record.target_prompt_tokens, record


def test_prefix_cache_keeps_ninety_percent_of_the_best_on_turns_three_to_eight(low_load_cell):
    _, _, result, _ = low_load_cell
    for turn in range(3, 9):
        assert result.summary.turn(turn).cached_of_best >= 0.9, result.summary.turn(turn)


def test_records_and_effective_config_are_written(low_load_cell):
    _, plan, result, out = low_load_cell
    requests = pd.read_parquet(out / REQUESTS_FILE)
    jobs = pd.read_parquet(out / JOBS_FILE)
    assert len(requests) == 8 * len(plan.jobs) and len(jobs) == len(plan.jobs)
    assert result.engine_facts.num_kv_blocks == 2400 and result.engine_facts.block_size == 32
    assert (out / "server.log").stat().st_size > 0


def test_no_vllm_process_is_left_afterwards(low_load_cell):
    assert vllm_processes() == []
