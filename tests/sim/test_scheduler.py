"""The simulator's vLLM step (``SimScheduler``) on small pools: admission, preemption, chunking, prefix hits,
and Continuum's pins, release rules, ordering and reserve as the simulator applies them."""

from __future__ import annotations

from orchestrator.cell.sim_config import SchedulerConfig
from orchestrator.mechanisms.continuum.config import AdmissionRelease, ContinuumConfig
from orchestrator.mechanisms.continuum.retention import ContinuumPins
from orchestrator.mechanisms.ordering import JobOrder, Ordering
from orchestrator.mechanisms.request import SimRequest
from orchestrator.mechanisms.retention import Retention
from orchestrator.mechanisms.tier import NoTier
from orchestrator.sim.scheduler import SimMechanisms, SimScheduler, StepPlan

BLOCK = 16


def _scheduler(num_blocks: int, *, budget: int = 1000, max_seqs: int = 8, job_priority: bool = False,
               pins: ContinuumConfig | None = None, **options):  # fmt: skip
    retention = ContinuumPins(pins) if pins is not None else Retention()
    mechanisms = SimMechanisms(JobOrder() if job_priority else Ordering(), retention, NoTier())
    config = SchedulerConfig(num_blocks=num_blocks, num_shared_blocks=0, max_num_batched_tokens=budget,
                             max_num_seqs=max_seqs, block_size=BLOCK, **mechanisms.recorded(), **options)  # fmt: skip
    return SimScheduler(config, mechanisms)


def _turn(job: str, index: int, turn: int, prompt_tokens: int, last: bool = False, at: float = 0.0,
          output: int = 1) -> SimRequest:  # fmt: skip
    return SimRequest(f"{job}-t{turn}", job, index, turn, last, prompt_tokens, at, output)


def _step(scheduler: SimScheduler, now: float = 0.0, finish: bool = True) -> StepPlan:
    """One engine step as ``sim.engine`` runs it: schedule, then every request whose prompt is computed
    samples a token and (unless not ``finish``) finishes at its ``output_tokens``; the finishes' unpins join the
    plan's."""
    plan = scheduler.schedule(now)
    for request, _, _ in plan.scheduled:
        if request.num_computed >= request.num_tokens and not request.done:
            request.num_output += 1
            if finish and request.num_output >= request.output_tokens:
                plan.unpins += scheduler.finish(request, now)
    _assert_blocks_add_up(scheduler)
    return plan


def _assert_blocks_add_up(scheduler: SimScheduler) -> None:
    held = sum(request.num_blocks for request in scheduler.running) + scheduler.num_pinned_blocks
    assert scheduler.pool.num_free == scheduler.config.num_blocks - scheduler.config.num_shared_blocks - held


def _reasons(plan: StepPlan) -> list[tuple[str, str]]:
    return [(pin.job_id, reason) for pin, reason in plan.unpins]


def test_admission_stops_at_the_first_waiting_request_that_cannot_get_blocks():
    scheduler = _scheduler(num_blocks=10)
    first, blocked, small = _turn("a", 0, 1, 100, output=5), _turn("b", 1, 1, 100, output=5), _turn("c", 2, 1, 10)
    for request in (first, blocked, small):
        scheduler.add(request)
    plan = _step(scheduler)
    # 7 blocks for "a" leave 3; "b" needs 7 and the small "c" behind it waits too (head of line).
    assert plan.admitted == [first] and scheduler.running == [first]
    assert len(scheduler.waiting) == 2 and scheduler.waiting.peek() is blocked
    assert scheduler.pool.num_free == 3


def test_a_decode_short_of_blocks_preempts_the_newest_running_request_by_recompute():
    scheduler = _scheduler(num_blocks=4)
    older, newer = _turn("a", 0, 1, 31, output=10), _turn("b", 1, 1, 31, output=10)
    scheduler.add(older)
    scheduler.add(newer)
    assert _step(scheduler).admitted == [older, newer]  # 2 blocks each: the pool is full
    assert _step(scheduler).preempted == 0  # token 32 still fits in the second block
    plan = _step(scheduler)  # token 33 needs a third block for each
    assert plan.preempted == 1 and scheduler.num_preemptions == 1
    assert [request for request, _, _ in plan.scheduled] == [older] and scheduler.running == [older]
    # Recompute: "b" lost its blocks and progress and waits at the head of the queue.
    assert newer.num_blocks == 0 and newer.num_computed == 0 and scheduler.waiting.peek() is newer
    assert older.num_blocks == 3 and scheduler.pool.num_free == 1


def test_prefill_is_chunked_under_the_token_budget_and_the_rest_of_a_step_admits_the_next_request():
    scheduler = _scheduler(num_blocks=64, budget=40)
    long, short = _turn("a", 0, 1, 100, output=3), _turn("b", 1, 1, 50, output=3)
    scheduler.add(long)
    scheduler.add(short)
    chunks = [[(request.request_id, num, before) for request, num, before in _step(scheduler).scheduled]
              for _ in range(3)]  # fmt: skip
    assert chunks == [
        [("a-t1", 40, 0)],
        [("a-t1", 40, 40)],
        [("a-t1", 20, 80), ("b-t1", 20, 0)],  # the running request first, then the budget left over
    ]
    assert long.num_output == 1 and short.num_output == 0 and long.num_blocks == 7 and short.num_blocks == 2


def test_a_long_prompt_waits_until_all_of_it_fits_though_it_is_given_blocks_a_chunk_at_a_time():
    # vLLM 0.32 (scheduler_reserve_full_isl): 10 blocks, "a" holds 4; "b" needs 7 for its 100 tokens.
    for reserve_full_prompt in (True, False):
        scheduler = _scheduler(num_blocks=10, budget=32, reserve_full_prompt=reserve_full_prompt)
        running, long = _turn("a", 0, 1, 64, output=40), _turn("b", 1, 1, 100, output=40)
        scheduler.add(running)
        _step(scheduler)
        _step(scheduler)
        scheduler.add(long)
        plan = _step(scheduler)
        if reserve_full_prompt:
            assert plan.admitted == [] and scheduler.waiting.peek() is long
            assert all(_step(scheduler).preempted == 0 for _ in range(40))
        else:
            # Admitted on its first chunk (2 blocks), it runs the pool dry mid-prefill: someone is preempted.
            assert plan.admitted == [long] and long.num_blocks == 2
            assert sum(_step(scheduler).preempted for _ in range(40)) > 0


def test_a_later_turn_hits_the_full_blocks_its_previous_turn_computed():
    scheduler = _scheduler(num_blocks=64)
    first = _turn("a", 0, 1, 100)
    scheduler.add(first)
    _step(scheduler)
    assert first.done and scheduler.pool.cached_blocks("a") == 6  # 100 computed tokens: 6 full blocks
    second = _turn("a", 0, 2, 151, last=True)
    scheduler.add(second)
    plan = _step(scheduler)
    assert second.cached_tokens == 6 * BLOCK
    assert [(request, num, before) for request, num, before in plan.scheduled] == [(second, 151 - 96, 96)]


def _pinning(num_blocks: int = 64, job_priority: bool = False, **config) -> SimScheduler:
    return _scheduler(num_blocks, job_priority=job_priority, pins=ContinuumConfig(**config))


def test_a_turn_is_pinned_until_its_jobs_next_turn_takes_it_and_the_last_turn_is_freed():
    scheduler = _pinning()
    scheduler.add(_turn("a", 0, 1, 79))
    plan = _step(scheduler)
    assert scheduler.retention.holds("a") and scheduler.num_pinned_blocks == 5 and scheduler.pool.num_free == 59
    assert plan.unpins == []

    last = _turn("a", 0, 2, 130, last=True, at=1.0)
    scheduler.add(last)
    plan = _step(scheduler, now=1.0)
    # The pin's 4 full blocks are hit; its partial tail block went back before the last turn allocated.
    assert _reasons(plan) == [("a", "next_turn")] and last.cached_tokens == 4 * BLOCK
    assert last.done and not scheduler.retention.holds("a") and scheduler.num_pinned_blocks == 0
    assert scheduler.pool.num_free == 64 and not scheduler.running


def test_a_pin_is_released_when_its_ttl_is_over():
    scheduler = _pinning(ttl_s=2.0)
    scheduler.add(_turn("a", 0, 1, 79))
    _step(scheduler, now=0.0)
    assert _reasons(scheduler.schedule(1.9)) == []
    plan = scheduler.schedule(2.0)
    assert _reasons(plan) == [("a", "ttl")] and scheduler.num_pinned_blocks == 0
    assert scheduler.pool.num_free == 64 and scheduler.pool.cached_blocks("a") == 4  # freed, still cached


def _old_and_young_pinned(**config) -> SimScheduler:
    """A 20-block pool with job 1's 5 blocks (4 cached) and job 5's 7 blocks (6 cached) pinned: 8 free."""
    scheduler = _pinning(num_blocks=20, reserve_for_pinned=False, ttl_s=60.0, **config)
    scheduler.add(_turn("old", 1, 1, 79))
    _step(scheduler, now=0.0)
    scheduler.add(_turn("young", 5, 1, 100))
    _step(scheduler, now=0.1)
    assert scheduler.num_pinned_blocks == 12 and scheduler.pool.num_free == 8
    return scheduler


def test_under_pressure_an_older_jobs_turn_takes_a_younger_jobs_pin():
    scheduler = _old_and_young_pinned()
    turn = _turn("old", 1, 2, 250)  # 16 blocks, 4 of them hit: 12 more, 8 free
    scheduler.add(turn)
    plan = _step(scheduler)
    assert _reasons(plan) == [("young", "pressure"), ("old", "next_turn")] and plan.admitted == [turn]
    assert turn.cached_tokens == 4 * BLOCK


def test_under_pressure_a_younger_jobs_turn_waits_rather_than_take_an_older_jobs_pin():
    scheduler = _old_and_young_pinned()
    turn = _turn("young", 5, 2, 250)  # 16 blocks, 6 of them hit: 10 more, 8 free
    scheduler.add(turn)
    plan = _step(scheduler)
    assert plan.admitted == [] and plan.unpins == [] and scheduler.num_pinned_blocks == 12


def test_under_the_idle_rule_the_latest_pin_gives_way_even_the_requesting_jobs_own():
    scheduler = _old_and_young_pinned(admission_release=AdmissionRelease.IDLE)
    turn = _turn("young", 5, 2, 250)
    scheduler.add(turn)
    plan = _step(scheduler)
    # Its own pin goes first (the latest); its 6 cached blocks are then hit from the free queue, which
    # leaves 14 free for 16: the older pin goes too, as nothing else runs.
    assert _reasons(plan) == [("young", "pressure"), ("old", "pressure")] and plan.admitted == [turn]
    assert turn.cached_tokens == 6 * BLOCK


def test_under_the_idle_rule_no_pin_gives_way_while_another_request_runs():
    scheduler = _old_and_young_pinned(admission_release=AdmissionRelease.IDLE)
    running = _turn("other", 9, 1, 15, last=True)
    scheduler.add(running)
    _step(scheduler, finish=False)
    turn = _turn("young", 5, 2, 250)
    scheduler.add(turn)
    plan = _step(scheduler, finish=False)
    assert plan.admitted == [] and plan.unpins == [] and scheduler.running == [running]


def test_the_reserve_holds_a_new_jobs_first_turn_back_while_a_pinned_job_waits_for_its_next_turn():
    scheduler = _pinning(num_blocks=32, job_priority=True, reserve_for_pinned=True, ttl_s=60.0)
    scheduler.add(_turn("finished", 0, 1, 319, last=True))
    _step(scheduler)  # teaches the reserve: a finished job holds 20 blocks
    scheduler.add(_turn("pinned", 1, 1, 79))
    _step(scheduler)
    assert scheduler.num_pinned_blocks == 5 and scheduler.pool.num_free == 27

    # 13 blocks would leave 14 free, less than the 20 - 5 the pinned job may still grow by.
    new = _turn("new", 2, 1, 200)
    scheduler.add(new)
    plan = _step(scheduler)
    assert plan.admitted == [] and plan.unpins == [] and scheduler.waiting.peek() is new

    # Its last turn jumps the queue, takes the pin, and with no job left to grow the new job goes in.
    last = _turn("pinned", 1, 2, 130, last=True)
    scheduler.add(last)
    plan = _step(scheduler)
    assert plan.admitted == [last, new] and _reasons(plan) == [("pinned", "next_turn")]


def test_a_pinned_jobs_waiting_turn_goes_ahead_of_older_unpinned_work_under_priority_scheduling():
    scheduler = _scheduler(64, max_seqs=1, job_priority=True, pins=ContinuumConfig(ttl_s=60.0))
    scheduler.add(_turn("young", 7, 1, 79))
    _step(scheduler)
    older = _turn("old", 1, 1, 50)
    scheduler.add(older)
    pinned = _turn("young", 7, 2, 130, at=0.5)
    scheduler.add(pinned)
    assert _step(scheduler, now=0.5).admitted == [pinned]
    assert scheduler.waiting.peek() is older


def test_an_aborted_turn_frees_its_blocks_and_its_jobs_pin():
    scheduler = _pinning(ttl_s=60.0)
    scheduler.add(_turn("a", 0, 1, 79))
    _step(scheduler)
    second = _turn("a", 0, 2, 130)
    scheduler.add(second)
    unpins = scheduler.abort(second)
    assert [(pin.job_id, reason) for pin, reason in unpins] == [("a", "abort")]
    assert scheduler.num_pinned_blocks == 0 and scheduler.pool.num_free == 64 and not scheduler.has_work
