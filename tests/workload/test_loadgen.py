"""The load generator over real HTTP against the fake engine (``instant_server``): what it sent, when, and how
it meets slow and failing servers."""

from __future__ import annotations

import time

import pytest

from orchestrator.records.cell import RequestOptions
from orchestrator.records.schema import JobStatus, RequestStatus
from orchestrator.workload.actor import ClientActors
from orchestrator.workload.distributions import PRESETS, IntUniform, Uniform
from orchestrator.workload.loadgen import LoadGenerator
from orchestrator.workload.plan import build_plan
from orchestrator.workload.spec import WorkloadSpec


def _plan(counter, **fields):
    spec = WorkloadSpec(**{"jps": 4, "duration_s": 2, "scale": 0.05, "tool_time_s": 0.05, **fields})
    return build_plan(spec, counter)


def test_every_job_runs_all_turns_with_a_growing_context(instant_server, tiny_counter):
    plan = _plan(tiny_counter)
    result = LoadGenerator(instant_server.url, RequestOptions(model="m")).run(plan, epoch_unix=time.time())
    assert len(result.jobs) == len(plan.jobs) > 0
    assert all(job.status is JobStatus.COMPLETED and job.num_turns_completed == 8 for job in result.jobs)
    assert len(result.requests) == 8 * len(plan.jobs)
    for job in plan.jobs:
        arrivals = [a for a in instant_server.state.arrivals if a.job_id == job.job_id]
        assert [a.turn for a in arrivals] == list(range(1, 9))
        sizes = [a.prompt_chars for a in arrivals]
        assert sizes == sorted(sizes) and len(set(sizes)) == 8
        assert all(a.priority is None for a in arrivals)


def test_turns_are_scheduled_a_tool_time_after_the_previous_finish(instant_server, tiny_counter):
    plan = _plan(tiny_counter, tool_time_s=0.2)
    result = LoadGenerator(instant_server.url, RequestOptions(model="m")).run(plan, epoch_unix=time.time())
    by_job = {}
    for record in result.requests:
        by_job.setdefault(record.job_id, []).append(record)
    for job in plan.jobs:
        records = sorted(by_job[job.job_id], key=lambda r: r.turn)
        assert records[0].scheduled_at == pytest.approx(job.arrival_offset_s)
        for before, after in zip(records, records[1:]):
            assert after.scheduled_at == pytest.approx(before.finished_at + 0.2)
            assert after.sent_at >= after.scheduled_at
            assert after.best_cached_tokens == before.prompt_tokens + before.completion_tokens
        assert all(r.completion_tokens == 20 and r.first_token_at is not None for r in records)


def test_each_turn_asks_for_its_own_length_and_waits_its_own_tool_time(instant_server, tiny_counter):
    plan = _plan(tiny_counter, num_turns=IntUniform(low=2, high=5), tool_tokens=PRESETS["agent-tool-tokens"],
                 output_tokens=Uniform(low=5, high=40), tool_time_s=Uniform(low=0, high=0.3))  # fmt: skip
    planned = {(job.job_id, turn.turn): turn for job in plan.jobs for turn in job.turns}
    assert len({len(job.turns) for job in plan.jobs}) > 1
    result = LoadGenerator(instant_server.url, RequestOptions(model="m")).run(plan, epoch_unix=time.time())
    assert len(result.requests) == len(planned)
    assert {job.job_id: job.num_turns_completed for job in result.jobs} == {job.job_id: len(job.turns) for job in plan.jobs}
    records = {(record.job_id, record.turn): record for record in result.requests}
    for (job_id, turn), shape in planned.items():
        record = records[job_id, turn]
        assert record.completion_tokens == shape.output_tokens and record.is_last == shape.is_last
        if not shape.is_last:
            after = records[job_id, turn + 1]
            assert after.scheduled_at == pytest.approx(record.finished_at + shape.tool_time_s)


def test_priority_is_the_job_arrival_index_when_requested(instant_server, tiny_counter):
    plan = _plan(tiny_counter)
    LoadGenerator(instant_server.url, RequestOptions(model="m", send_priority=True)).run(plan, time.time())
    index_of = {job.job_id: job.index for job in plan.jobs}
    assert all(a.priority == index_of[a.job_id] for a in instant_server.state.arrivals)


def test_a_slow_server_times_requests_out_and_the_jobs_are_recorded_as_timeouts(instant_server, tiny_counter):
    instant_server.state.token_delay_s = 0.1  # 20 tokens: 2 s per turn
    plan = _plan(tiny_counter, duration_s=1, request_timeout_s=0.5)
    result = LoadGenerator(instant_server.url, RequestOptions(model="m")).run(plan, epoch_unix=time.time())
    assert len(result.jobs) == len(plan.jobs) > 0
    assert all(job.status is JobStatus.TIMEOUT and job.jct_s is None for job in result.jobs)
    assert all(r.status is RequestStatus.TIMEOUT and r.turn == 1 for r in result.requests)
    assert all(0.45 < r.finished_at - r.sent_at < 1.5 for r in result.requests)


def test_the_job_deadline_cuts_a_job_short(instant_server, tiny_counter):
    # 0.6 s per turn (20 tokens) and 0.05 s per tool call: 8 turns take at least 5.15 s and cannot finish in 4.5 s,
    # while a first turn fits in the deadline even 7 times slower than asked (in one run of the suite on a saturated
    # machine, every first turn of 1 s took over 4 s).
    instant_server.state.token_delay_s = 0.03
    plan = _plan(tiny_counter, duration_s=1, job_timeout_s=4.5)
    result = LoadGenerator(instant_server.url, RequestOptions(model="m")).run(plan, epoch_unix=time.time())
    assert all(job.status is JobStatus.TIMEOUT and job.num_turns_completed < 8 for job in result.jobs)
    # Cut short at the deadline, not refused: each job ran until its 4.5 s were up, and turns finished in them
    # (about 6 per job on a quiet machine; asked of the jobs together, and only to be some).
    assert all(4.45 < job.finished_at - job.arrival_at < 5.5 for job in result.jobs)
    assert sum(job.num_turns_completed for job in result.jobs) >= len(result.jobs)


def test_http_errors_mark_the_request_and_job_as_errors(instant_server, tiny_counter):
    instant_server.state.fail_status = 503
    plan = _plan(tiny_counter)
    result = LoadGenerator(instant_server.url, RequestOptions(model="m")).run(plan, epoch_unix=time.time())
    assert all(job.status is JobStatus.ERROR for job in result.jobs)
    assert all(r.status is RequestStatus.ERROR and "HTTP 503" in r.error for r in result.requests)



def test_ray_actors_split_the_jobs_share_one_clock_and_serve_the_next_run(ray_cluster, instant_server, tiny_counter):
    """Two load-generator actors on the shared cluster: their records must share one clock; the same two run the
    next plan from a fresh count, and a cancelled run leaves none for the one after it."""
    plan = _plan(tiny_counter, jps=8)
    clients = ClientActors()
    try:
        result = clients.start(plan, instant_server.url, RequestOptions(model="m"), 2).result()
        assert [job.job_id for job in result.jobs] == [job.job_id for job in plan.jobs]
        assert len(result.requests) == 8 * len(plan.jobs)
        # Records from both actors sit on one time axis: each turn 1 was scheduled at its planned offset.
        firsts = {r.job_id: r for r in result.requests if r.turn == 1}
        assert all(firsts[j.job_id].scheduled_at == pytest.approx(j.arrival_offset_s) for j in plan.jobs)
        assert max(r.dispatch_lag_s for r in firsts.values()) < 0.5

        kept = clients.actor_ids
        assert len(set(kept)) == 2
        again = clients.start(plan, instant_server.url, RequestOptions(model="m"), 2)
        assert again.progress().jobs_finished == 0
        assert len(again.result().requests) == 8 * len(plan.jobs) and clients.actor_ids == kept

        clients.start(plan, instant_server.url, RequestOptions(model="m"), 2).cancel()
        assert clients.actor_ids == ()
        assert len(clients.start(plan, instant_server.url, RequestOptions(model="m"), 2).result().jobs) == len(plan.jobs)
        assert not set(clients.actor_ids) & set(kept)
    finally:
        clients.shutdown()
