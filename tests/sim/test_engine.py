"""The simulated engine's behaviour: what vLLM does, visible in the records and the trace."""

import json
import statistics
from collections import Counter

import pytest

from orchestrator.records.scheduler_trace import Finish, Step, Unpin
from orchestrator.records.schema import JobStatus, RequestStatus
from orchestrator.roofline.hardware import Device
from orchestrator.sim.config import sim_engine
from orchestrator.sim.events import Deadline, EventQueue, ReachEngine, ScheduleStep, SendTurn
from orchestrator.sim.loop import Simulation, simulate
from orchestrator.workload.schedule import poisson_arrivals
from orchestrator.workload.spec import WorkloadSpec

LLAMA = "llama-3.1-8b-instruct"


def run(policy="fcfs", jps=1.0, gpu="H200", dram_gb=400, **engine_overrides):
    workload = WorkloadSpec(jps=jps, **engine_overrides.pop("workload", {}))
    engine = sim_engine(Device.gpu(gpu), LLAMA, policy, dram_gb, workload, **engine_overrides)
    return simulate(workload, engine)


def mean_jct(result):
    return statistics.fmean(job.jct_s for job in result.jobs if job.jct_s is not None)


def cached_of_best(result, turns=range(3, 9)):
    ok = [r for r in result.requests if r.status is RequestStatus.OK and r.turn in turns]
    return sum(r.cached_tokens for r in ok) / sum(r.best_cached_tokens for r in ok)


def steps(result):
    return [event for event in result.scheduler_trace if isinstance(event, Step)]


def test_the_same_cell_gives_the_same_records_and_trace():
    first, second = run("continuum", jps=6), run("continuum", jps=6)
    assert first.requests == second.requests and first.jobs == second.jobs
    assert first.scheduler_trace_bytes() == second.scheduler_trace_bytes()


def test_every_planned_job_runs_eight_turns_of_twenty_tokens_on_the_plans_schedule():
    result = run(jps=1)
    arrivals = poisson_arrivals(1.0, 45.0, 42)
    assert sorted(job.arrival_at for job in result.jobs) == sorted(arrivals)
    assert all(job.status is JobStatus.COMPLETED and job.num_turns_completed == 8 for job in result.jobs)
    assert Counter(r.turn for r in result.requests) == {turn: len(arrivals) for turn in range(1, 9)}
    assert {r.completion_tokens for r in result.requests} == {20}
    for record in result.requests:
        assert record.scheduled_at <= record.first_token_at <= record.finished_at
        assert record.cached_tokens % 16 == 0 and record.cached_tokens < record.prompt_tokens
    # The next turn is due exactly one tool time after the previous one finished.
    by_job = {}
    for record in result.requests:
        by_job.setdefault(record.job_id, []).append(record)
    for records in by_job.values():
        for previous, following in zip(records, records[1:]):
            assert following.scheduled_at == pytest.approx(previous.finished_at + 0.5)


def test_at_low_load_every_turn_hits_its_prefix_and_the_policies_agree():
    fcfs, continuum = run("fcfs", jps=1), run("continuum", jps=1)
    assert cached_of_best(fcfs) > 0.95 and cached_of_best(continuum) > 0.95
    assert mean_jct(continuum) == pytest.approx(mean_jct(fcfs), rel=0.05)
    assert mean_jct(fcfs) > 7 * 0.5  # seven tool calls are part of every job


def test_under_overload_fcfs_loses_prefix_hits_that_continuums_pins_keep():
    fcfs, continuum = run("fcfs", jps=10), run("continuum", jps=10)
    assert cached_of_best(fcfs) < 0.6 < 0.9 < cached_of_best(continuum)
    assert mean_jct(continuum) < mean_jct(fcfs) / 2
    finishes = Counter(event.action for event in continuum.scheduler_trace if isinstance(event, Finish))
    reasons = Counter(event.reason for event in continuum.scheduler_trace if isinstance(event, Unpin))
    assert finishes["pin"] > 0 and reasons["next_turn"] > 0
    assert all(event.pinned_blocks == 0 for event in steps(fcfs))


@pytest.mark.parametrize(("gpu", "budget", "max_seqs"), [("H200", 8192, 1024), ("L40S", 2048, 256)])
def test_each_step_stays_within_vllms_token_budget_and_sequence_limit_for_the_gpu(gpu, budget, max_seqs):
    result = run(jps=6, gpu=gpu, dram_gb=100)
    events = steps(result)
    assert max(e.prefill_tokens + e.decode_tokens for e in events) == budget  # chunked prefill fills it
    assert max(e.running for e in events) <= max_seqs


def test_a_pool_too_small_for_the_running_decodes_preempts_by_recompute_and_still_finishes_every_job():
    result = run(jps=3, num_kv_blocks=1500)  # 24K tokens: two turn-8 contexts
    assert result.stats.num_preemptions > 0
    assert sum(event.preempted for event in steps(result)) == result.stats.num_preemptions
    assert all(job.status is JobStatus.COMPLETED for job in result.jobs)


def test_lmcache_saves_every_prompt_and_loads_what_the_gpu_evicted_and_a_1_gb_tier_loads_little():
    full, nocache = run("lmcache", jps=6), run("lmcache-nocache", jps=6, dram_gb=64)
    assert full.stats.tier_counters.kv_offload_store_bytes > 0 and full.stats.save_stall_s > 0
    assert full.stats.tier_counters.kv_offload_load_bytes > 10 * nocache.stats.tier_counters.kv_offload_load_bytes
    assert cached_of_best(full) > cached_of_best(run("fcfs", jps=6)) + 0.2


def test_native_offload_loads_beside_the_forward_pass_without_a_save_stall():
    result = run("native-offload", jps=6)
    assert result.stats.save_stall_s == 0 and result.stats.load_stall_s == 0
    assert result.stats.tier_counters.kv_offload_load_bytes > 0
    assert all(job.status is JobStatus.COMPLETED for job in result.jobs)


def test_a_request_past_its_timeout_is_aborted_and_its_job_counted_as_timed_out():
    result = run(jps=10, workload={"request_timeout_s": 20.0})
    timed_out = [job for job in result.jobs if job.status is JobStatus.TIMEOUT]
    assert timed_out and len(result.jobs) == len(poisson_arrivals(10.0, 45.0, 42))
    for record in result.requests:
        if record.status is RequestStatus.TIMEOUT:
            assert record.finished_at == pytest.approx(record.scheduled_at + 20.0) and record.cached_tokens is None


def test_the_trace_has_the_plugins_event_kinds_and_fields():
    result = run("continuum", jps=3)
    lines = [json.loads(line) for line in result.scheduler_trace_bytes().decode().splitlines()]
    kinds = Counter(line["kind"] for line in lines)
    assert kinds["admit"] == kinds["finish"] == len(result.requests) and kinds["step"] == result.stats.steps
    step = next(line for line in lines if line["kind"] == "step")
    assert {"t", "running", "waiting", "scheduled", "prefill_tokens", "decode_tokens", "free_blocks", "pinned_blocks",
            "preempted", "context_tokens", "attention_pairs"} <= set(step)  # fmt: skip


def test_events_at_the_same_time_run_sends_and_arrivals_in_push_order_then_deadlines_then_the_engine():
    queue = EventQueue()
    engine, deadline = ScheduleStep(1.0), Deadline(1.0, None, 1.0)
    arrival, send, earlier = ReachEngine(1.0, None), SendTurn(1.0, None), ScheduleStep(0.5)
    for event in (engine, deadline, arrival, send, earlier):
        queue.push(event)
    assert [queue.pop() for _ in range(5)] == [earlier, arrival, send, deadline, engine]
    assert not queue


def test_a_request_whose_deadline_is_the_moment_it_reaches_the_engine_is_aborted_before_the_engine_looks():
    calibration = sim_engine(Device.gpu("H200"), LLAMA, "continuum", 0, WorkloadSpec(jps=1)).cost.calibration
    result = run("continuum", jps=1, workload={"request_timeout_s": calibration.request_overhead_s})
    assert result.jobs and all(job.status is JobStatus.TIMEOUT for job in result.jobs)
    assert {record.turn for record in result.requests} == {1}
    assert result.scheduler_trace == [] and result.stats.steps == 0


def test_what_fell_due_during_a_step_is_handled_in_time_order_when_it_ends():
    # A request reached the engine at 4.0 and its client gave up at 4.5, both during a step that ran until 5.0:
    # the engine takes it in first and then aborts it, as vLLM aborts a request whose client went away.
    workload = WorkloadSpec(jps=1)
    sim = Simulation(workload, sim_engine(Device.gpu("H200"), LLAMA, "fcfs", 0, workload))
    (_, first_job), *_ = sim.clients.start()
    request, _ = sim.clients.send(first_job, due=3.9)
    queue = EventQueue()
    arrival, deadline = ReachEngine(4.0, request), Deadline(4.5, request, 4.5)
    for event in (deadline, arrival):
        queue.push(event)
    assert [queue.pop(), queue.pop()] == [arrival, deadline]
    sim.clocks[0] = 5.0  # the step's end
    sim.handle(arrival)
    assert request.in_engine and sim.engines[0].has_work and sim.now == 5.0
    sim.handle(deadline)
    assert request.done and not sim.engines[0].has_work and sim.now == 5.0
    assert [job.status for job in sim.clients.jobs] == [JobStatus.TIMEOUT]
