"""One engine step of vLLM v1's scheduler over the simulated block pool, with the policies' hooks (pure).

The structure follows ``vllm/v1/core/sched/scheduler.py``:

1. Running requests, in order, each get their next tokens (a decode token, or the next chunk of a
   prefill) within the step's token budget (``max_num_batched_tokens``). When blocks run out, the
   lowest-priority running request (the last admitted under FCFS) is preempted by recompute: its blocks
   are freed (they stay cached) and it goes back to the front of the waiting queue.
2. Only if nothing was preempted, waiting requests are admitted from the head of the queue while budget
   and ``max_num_seqs`` allow: their cached prefix is hit, blocks are allocated for the rest (chunked
   under the budget), and the first request that cannot get blocks stops admission (head of line). A
   request is admitted only when its whole prompt would fit (``reserve_full_prompt``, vLLM 0.32's default).

A policy's mechanisms (``orchestrator.mechanisms``) hook in where they do in the real engine, and the scheduler
asks them rather than knowing which it has: the ordering sorts the waiting queue and picks a preemption's victim;
the retention (``SimRetention``: Continuum's pins, or none) is asked at every point a pin can be taken, released or
wait for; the tier's store saves prompts and turns GPU misses into loads, and the tier says whether a load runs
beside the forward passes, as vLLM's connector does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from orchestrator.cell.sim_config import SchedulerConfig
from orchestrator.mechanisms.ordering import Ordering
from orchestrator.mechanisms.request import SimRequest
from orchestrator.mechanisms.retention import Retention, SimRetention
from orchestrator.mechanisms.tier import Tier
from orchestrator.records.scheduler_trace import UnpinReason
from orchestrator.sim.blocks import BlockPool
from orchestrator.sim.connector import Load, SimConnector
from orchestrator.sim.kv_cache import Release, SimKVCache


class Scheduled(NamedTuple):
    """A request given tokens in a step."""

    request: SimRequest
    num_new: int  # tokens computed in this step
    context_before: int  # tokens already computed before them


@dataclass
class StepPlan:
    """What one ``schedule()`` decided: each scheduled request with its new tokens and context before them."""

    scheduled: list[Scheduled] = field(default_factory=list)
    admitted: list[SimRequest] = field(default_factory=list)  # first admissions only
    preempted: int = 0
    loads: list[Load] = field(default_factory=list)  # landing before the forward's end
    async_loads: list[Load] = field(default_factory=list)  # landing beside the forward passes
    unpins: list[Release] = field(default_factory=list)


class SimMechanisms(NamedTuple):
    """A policy's mechanisms, handed to each simulated scheduler as vLLM's scheduler is handed its connector's
    configuration: the ordering, the retention (each scheduler makes its own hooks of it, ``Retention.sim_hooks``,
    since its pins are that replica's) and the tier (each makes its own store of it)."""

    ordering: Ordering
    retention: Retention
    tier: Tier

    def recorded(self) -> dict:
        """What a simulated replica's configuration records of them (``SchedulerConfig``'s fields)."""
        return {"job_priority": self.ordering.sends_priority, "pins": self.retention.pins, "tier": self.tier.sim_model}


class SimScheduler:
    """vLLM v1's scheduler over a ``SimKVCache``, stepped by ``sim.engine``: ``add`` turns, ``schedule`` a step,
    then ``finish`` or ``abort`` requests.

    Invariants between calls: the pool's free blocks are all its blocks but the shared prefix, the running
    requests' ``num_blocks`` and the pinned blocks (a waiting request holds none); a job has at most one pin;
    Continuum's decisions are ``mechanisms.continuum.rules``'s, never made here.
    """

    def __init__(self, config: SchedulerConfig, mechanisms: SimMechanisms):
        self.config, self.ordering = config, mechanisms.ordering
        self.kv = SimKVCache(config.num_blocks, config.num_shared_blocks, config.block_size,
                             mechanisms.retention.sim_hooks())  # fmt: skip
        self.connector = SimConnector(mechanisms.tier, config.tier_tokens, config.block_size)
        self.running: list[SimRequest] = []
        self.waiting = self.ordering.waiting_queue()
        self.num_preemptions = 0

    @property
    def pool(self) -> BlockPool:
        return self.kv.pool

    @property
    def retention(self) -> SimRetention:
        return self.kv.retention

    # Requests in and out.
    def add(self, request: SimRequest) -> None:
        request.priority = self.retention.arrived(request, self.ordering.priority(request))
        self.waiting.add(request)

    def abort(self, request: SimRequest) -> list[Release]:
        """The client gave up on ``request``: it leaves the engine and its blocks are freed, and so is its job's
        pin; the pins released."""
        if request in self.running:
            self.running.remove(request)
        else:
            self.waiting.remove(request)
        self.kv.free(request)
        pin = self.retention.take_for_aborted_job(request.job_id)
        return [self.kv.release(pin, UnpinReason.ABORT)] if pin is not None else []

    def finish(self, request: SimRequest, now: float) -> list[Release]:
        """The request's last token is out: its blocks are freed, or pinned until the job's next turn; the
        pins that pin replaced, released."""
        self.running.remove(request)
        request.done = True
        if not self.retention.keeps_finished(request, self.config.block_size):
            self.kv.free(request)
            return []
        return self.kv.pin_finished(request, now)

    @property
    def has_work(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    @property
    def num_pinned_blocks(self) -> int:
        return self.retention.num_pinned_blocks

    # One step.
    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan()
        plan.unpins += [self.kv.release(pin, UnpinReason.TTL) for pin in self.retention.take_expired(now, self.waiting)]
        budget = self.config.max_num_batched_tokens
        scheduled: set[int] = set()  # ids of the running requests still scheduled (a preemption undoes one)
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            if request.ready_at > now:
                index += 1
                continue
            num_new = min(request.num_tokens - request.num_computed, budget)
            if not self._allocate_running(request, num_new, plan, scheduled):
                break  # it had to preempt itself
            scheduled.add(id(request))
            plan.scheduled.append(Scheduled(request, num_new, request.num_computed))
            budget -= num_new
            index += 1
        budget += sum(entry.num_new for entry in plan.scheduled if id(entry.request) not in scheduled)
        plan.scheduled = [entry for entry in plan.scheduled if id(entry.request) in scheduled]
        if not plan.preempted:
            self._admit(now, budget, plan)
        for request, num_new, _ in plan.scheduled:
            request.num_computed += num_new
        return plan

    def _allocate_running(self, request: SimRequest, num_new: int, plan: StepPlan, scheduled: set[int]) -> bool:
        needed = self.kv.blocks_for(request, request.num_computed + num_new) - request.num_blocks
        while not self.kv.allocate(request, needed, self._others_running(request), plan.unpins):
            victim = self.ordering.preemption_victim(self.running)
            self.running.remove(victim)
            scheduled.discard(id(victim))
            self._preempt(victim)
            plan.preempted += 1
            if victim is request:
                return False
        return True

    def _admit(self, now: float, budget: int, plan: StepPlan) -> None:
        block, kv = self.config.block_size, self.kv
        while len(self.waiting) and budget > 0 and len(self.running) < self.config.max_num_seqs:
            request = self.waiting.peek()
            hit_tokens, from_pin = kv.gpu_hit(request)
            load = self.connector.lookup(request, hit_tokens)
            load_tokens = load.num_tokens
            computed = hit_tokens + load_tokens
            num_new = min(request.num_tokens - computed, budget)
            hit_blocks = max(0, hit_tokens // block - request.shared_blocks)
            shared_hit = min(hit_tokens // block, request.shared_blocks)
            needed = kv.blocks_for(request, computed + num_new) - hit_blocks
            must_fit = needed
            if self.config.reserve_full_prompt:
                must_fit = kv.blocks_for(request, request.num_tokens) - hit_blocks
            # Cached blocks sitting in the free queue count as free: hitting them uses them up.
            hit_from_free = 0 if from_pin else hit_blocks
            others = self._others_running(request)
            if self.retention.must_wait_for_reserve(request, self.pool.num_free, self.running, block):
                break
            if not kv.make_room(request, must_fit + hit_from_free, others, plan.unpins, shared_hit):
                break
            if from_pin and not self.retention.holds(request.job_id):
                # Its own pin gave way (the idle rule takes the latest pin, whoever's): its blocks are free
                # and still cached, so the hit now comes out of the free queue, as in vLLM, where
                # ``allocate_slots`` takes the hit blocks back after the pin released them.
                from_pin = False
                if not kv.make_room(request, must_fit + hit_blocks, others, plan.unpins, shared_hit):
                    break
            self.waiting.pop()
            self.connector.queried_tokens += request.num_tokens - hit_tokens
            if request.shared_segments:
                request.shared_hold = self.pool.hold_shared(request.shared_segments, shared_hit)
            if (release := kv.take_hit(request, hit_blocks, from_pin)) is not None:
                plan.unpins.append(release)
            self.pool.allocate(needed)
            request.num_blocks += needed
            request.num_computed = computed
            self.running.append(request)
            if request.cached_tokens is None:
                request.cached_tokens = computed
                plan.admitted.append(request)
            if load_tokens and self.connector.loads_beside_forward:
                # The request computes once its load has landed.
                plan.async_loads.append(load)
                continue
            if load_tokens:
                plan.loads.append(load)
            plan.scheduled.append(Scheduled(request, num_new, computed))
            budget -= num_new

    def shared_cost_of_running(self, request: SimRequest) -> int:
        """What a running request's every room check counts for its shared segments besides its new blocks."""
        return self.kv.shared_cost(request, 0)

    def apply_decode_steps(self, batch: list[SimRequest], num_steps: int,
                           allocations: list[tuple[int, int, int]]) -> None:  # fmt: skip
        """The first ``num_steps`` of a planned decode run (``sim.decode_run``): the blocks they allocate, as
        ``(step, place in the batch, blocks)`` in the order stepping would, and every request's tokens computed."""
        for step, index, num_blocks in allocations:
            if step >= num_steps:
                break
            self.pool.allocate(num_blocks)
            batch[index].num_blocks += num_blocks
        for request in batch:
            request.num_computed += num_steps

    def _others_running(self, request: SimRequest) -> int:
        return len(self.running) - (request in self.running)

    def _preempt(self, request: SimRequest) -> None:
        self.num_preemptions += 1
        self.kv.free(request)
        request.num_computed = 0
        request.ready_at = 0.0
        self.waiting.prepend(request)
