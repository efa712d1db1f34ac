"""The shipped agent trace replayed on the real CPU engine (issue 16's acceptance): every prompt's token count
and every scheduled time exactly as planned, and the prefix cache hitting the trace's declared shared blocks
and nothing else."""

from __future__ import annotations

import pytest

from orchestrator.gpus import CPU
from orchestrator.records.schema import RequestStatus
from orchestrator.sweep.planning.cells import CellSpec
from orchestrator.sweep.planning.spec import EngineKind, EngineOptions, RunLimits
from orchestrator.sweep.runtime.worker import CellWorker
from orchestrator.workload.schedule import schedule_for
from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.traces.generate import SHIPPED
from orchestrator.workload.traces.schema import TraceRef, load_trace

pytestmark = pytest.mark.engine

BLOCK = 32  # the CPU engine's block: the trace's 64-token blocks at scale 0.5


@pytest.fixture(scope="module")
def replayed():
    trace = TraceRef.of(SHIPPED)
    workload = WorkloadSpec(jps=2 * load_trace(trace).native_jps, duration_s=1000, scale=0.5, trace=trace,
                            request_timeout_s=300, job_timeout_s=600)  # fmt: skip
    cell = CellSpec(engine=EngineKind.VLLM, gpu=CPU, policy="fcfs", dram_gb=0, model="tiny", workload=workload,
                    engine_options=EngineOptions(num_kv_blocks=1200))  # fmt: skip
    worker = CellWorker()
    try:
        outcome = worker.run(cell, RunLimits(health_timeout_s=300, hang_timeout_s=120, client_actors=0))
    finally:
        worker.shutdown()
    assert outcome.status.is_done, outcome.reason
    return schedule_for(workload), outcome


def test_every_request_is_sent_as_planned_with_its_exact_prompt(replayed):
    schedule, outcome = replayed
    planned = {(job.job_id, turn.turn): (job, turn) for job in schedule.jobs for turn in job.turns}
    records = {(record.job_id, record.turn): record for record in outcome.requests}
    assert records.keys() == planned.keys() and all(r.status is RequestStatus.OK for r in records.values())
    assert outcome.config.schedule_fingerprint == schedule.fingerprint()
    for (job_id, number), (job, turn) in planned.items():
        record = records[(job_id, number)]
        assert record.prompt_tokens == turn.prompt_tokens  # within 1% asked; exact with the tiny tokenizer
        assert record.completion_tokens == turn.output_tokens
        if number == 1:
            assert record.scheduled_at == pytest.approx(job.arrival_s, abs=1e-9)  # the trace's arrival, halved
        else:
            previous = records[(job_id, number - 1)]
            assert record.scheduled_at == pytest.approx(previous.finished_at + job.turns[number - 2].tool_time_s,
                                                        abs=1e-9)  # fmt: skip


def test_the_prefix_cache_hits_the_declared_shared_blocks_and_nothing_else(replayed):
    schedule, outcome = replayed
    blocks = {(job.job_id, turn.turn): turn.prefix_blocks for job in schedule.jobs for turn in job.turns}
    requests = sorted(outcome.requests, key=lambda record: record.sent_at)

    def engine_hit(declared_blocks: int, prompt_tokens: int) -> int:
        # The trace's blocks are whole engine blocks here; vLLM never hits a prompt's last token.
        return min(declared_blocks * BLOCK, (prompt_tokens - 1) // BLOCK * BLOCK)

    def shared_run(chain: tuple[str, ...], available: set[str]) -> int:
        return next((i for i, block in enumerate(chain) if block not in available), len(chain))

    hits = 0
    for record in requests:
        chain = blocks[(record.job_id, record.turn)]
        # At most what requests sent before it declared (the record's best), and at least what requests that
        # had finished before it was sent declared (their blocks are computed and, in a roomy pool, kept).
        finished = {block for other in requests if other.finished_at <= record.sent_at
                    for block in blocks[(other.job_id, other.turn)]}  # fmt: skip
        most = engine_hit(record.best_cached_tokens // BLOCK, record.prompt_tokens)
        least = engine_hit(shared_run(chain, finished), record.prompt_tokens)
        assert least <= record.cached_tokens <= most, (record.job_id, record.turn, least, record.cached_tokens, most)
        hits += record.cached_tokens
    # Jobs of no group share nothing on their first turn; the rest of the traffic is mostly hits.
    for record in requests:
        if record.turn == 1 and blocks[(record.job_id, 1)][0].startswith(record.job_id):
            assert record.cached_tokens == 0
    assert hits > 0.5 * sum(record.prompt_tokens for record in requests)
