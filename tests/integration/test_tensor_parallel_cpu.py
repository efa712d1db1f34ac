"""A tensor-parallel replica on the real CPU engine: the tiny model sharded over two processes, each bound to one of
this machine's cores, runs a cell whose records match the same cell's on one process, and answers greedy prompts
token for token as it does."""

from __future__ import annotations

import pytest
import requests

from orchestrator.gpus import CPU
from orchestrator.records.schema import RequestStatus
from orchestrator.sweep.planning.cells import CellSpec
from orchestrator.sweep.planning.spec import EngineKind, EngineOptions, RunLimits
from orchestrator.sweep.runtime.worker import CellWorker
from orchestrator.workload.spec import WorkloadSpec

pytestmark = pytest.mark.engine

LIMITS = RunLimits(health_timeout_s=300, hang_timeout_s=120, client_actors=0)
# Each turn's prompt carries the answers before it, so a differing answer shows in every later prompt's length.
WORKLOAD = WorkloadSpec(jps=1, duration_s=2, scale=0.1, tool_time_s=0.1, seed=7)
PROMPTS = ("The quick brown fox jumps over the lazy dog and then", "harbor glacier orbit " * 60, "1 2 3 4 5 6 7 8 9")


def cell(tp: int) -> CellSpec:
    return CellSpec(engine=EngineKind.VLLM, gpu=CPU, policy="fcfs", dram_gb=0, model="tiny", workload=WORKLOAD,
                    engine_options=EngineOptions(num_kv_blocks=1200), tp=tp)  # fmt: skip


@pytest.fixture(scope="module")
def outcomes():
    """The cell on one process and on two, each replica kept up by its worker for the greedy prompts."""
    workers = [CellWorker(), CellWorker()]
    try:
        yield [worker.run(cell(tp), LIMITS) for worker, tp in zip(workers, (1, 2))]
    finally:
        for worker in workers:
            worker.shutdown()


def test_a_tp_2_cell_on_the_cpu_engine_records_what_the_tp_1_cell_does(outcomes):
    one, two = outcomes
    assert one.status.is_done and two.status.is_done, (one.reason, two.reason)
    argv = list(two.config.server_argv)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2" and two.config.server_env["VLLM_CPU_OMP_THREADS_BIND"]
    shape = {(r.job_id, r.turn): (r.prompt_tokens, r.completion_tokens) for r in one.requests}
    assert {(r.job_id, r.turn): (r.prompt_tokens, r.completion_tokens) for r in two.requests} == shape
    assert len(shape) > 8 and all(r.status is RequestStatus.OK for r in (*one.requests, *two.requests))


def test_a_tp_2_replica_answers_greedy_prompts_token_for_token_as_one_process_does(outcomes):
    answers = [[_greedy_tokens(outcome.config.server_argv, prompt) for prompt in PROMPTS] for outcome in outcomes]
    assert answers[0] == answers[1] and all(len(tokens) == 24 for tokens in answers[0])


def _greedy_tokens(server_argv: tuple[str, ...], prompt: str) -> list[int]:
    argv = list(server_argv)
    url = f"http://{argv[argv.index('--host') + 1]}:{argv[argv.index('--port') + 1]}/v1/completions"
    body = {"model": argv[argv.index("--served-model-name") + 1], "prompt": prompt, "max_tokens": 24,
            "min_tokens": 24, "ignore_eos": True, "temperature": 0.0, "return_token_ids": True}  # fmt: skip
    answer = requests.post(url, json=body, timeout=60)
    answer.raise_for_status()
    return answer.json()["choices"][0]["token_ids"]
