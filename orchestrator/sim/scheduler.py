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

from orchestrator.mechanisms.continuum.config import ContinuumConfig
from orchestrator.mechanisms.continuum.pins import Pin
from orchestrator.mechanisms.registry import recorded_ordering, recorded_tier, sim_retention
from orchestrator.mechanisms.request import SharedHold, SimRequest
from orchestrator.records.scheduler_trace import UnpinReason
from orchestrator.sim.blocks import BlockPool


@dataclass(frozen=True)
class SchedulerConfig:
    num_blocks: int
    num_shared_blocks: int  # the system prompt's full blocks, which every job shares: held all run
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int = 16
    # The policy's mechanisms as the record names them (``mechanisms.registry`` finds them again): its ordering
    # (vLLM priority scheduling by job arrival index), its pin rules and its tier's simulated model.
    job_priority: bool = False
    pins: ContinuumConfig | None = None
    tier: str | None = None
    tier_tokens: int = 0
    # vLLM 0.32's ``scheduler_reserve_full_isl`` (on by default): a waiting request is admitted only when its
    # whole prompt fits in the free blocks, though it is given blocks one chunk at a time. Without it a long
    # prompt admitted on its first chunk runs the pool dry mid-prefill and preemptions follow.
    reserve_full_prompt: bool = True


class Load(NamedTuple):
    """A request's prompt tokens loaded from the CPU tier instead of computed."""

    request: SimRequest
    num_tokens: int
    num_slow_tokens: int  # of them, read from a level behind host memory (a disk tier's), where the store has one


class Release(NamedTuple):
    """A pin released, and why."""

    pin: Pin
    reason: UnpinReason


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


class SimScheduler:
    """vLLM v1's scheduler over a ``BlockPool``, stepped by ``sim.engine``: ``add`` turns, ``schedule`` a step,
    then ``finish`` or ``abort`` requests.

    Invariants between calls: the pool's free blocks are all its blocks but the shared prefix, the running
    requests' ``num_blocks`` and the pinned blocks (a waiting request holds none); a job has at most one pin;
    Continuum's decisions are ``mechanisms.continuum.rules``'s, never made here.
    """

    def __init__(self, config: SchedulerConfig):
        self.config = config
        self.pool = BlockPool(config.num_blocks, config.num_shared_blocks)
        self.ordering = recorded_ordering(config.job_priority)
        self.retention = sim_retention(config.pins)
        self.tier_mechanism = recorded_tier(config.tier)
        self.tier = self.tier_mechanism.sim_store(config.tier_tokens)
        self.running: list[SimRequest] = []
        self.waiting = self.ordering.waiting_queue()
        self.num_preemptions = 0
        self.tier_queried_tokens = 0  # a prompt's tokens beyond its GPU hit, looked up in the CPU tier at admission
        self._pinned_shared: dict[str, SharedHold] = {}  # a pinned job's shared segments, held with its pin

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
        self._free(request)
        pin = self.retention.take_for_aborted_job(request.job_id)
        return [self._release(pin, UnpinReason.ABORT)] if pin is not None else []

    @property
    def has_work(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    @property
    def num_pinned_blocks(self) -> int:
        return self.retention.num_pinned_blocks

    # One step.
    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan()
        plan.unpins += [self._release(pin, UnpinReason.TTL) for pin in self.retention.take_expired(now, self.waiting)]
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
        needed = self.blocks_for(request, request.num_computed + num_new) - request.num_blocks
        while not self._allocate(request, needed, plan):
            victim = self.ordering.preemption_victim(self.running)
            self.running.remove(victim)
            scheduled.discard(id(victim))
            self._preempt(victim)
            plan.preempted += 1
            if victim is request:
                return False
        return True

    def _admit(self, now: float, budget: int, plan: StepPlan) -> None:
        block = self.config.block_size
        while len(self.waiting) and budget > 0 and len(self.running) < self.config.max_num_seqs:
            request = self.waiting.peek()
            hit_tokens, from_pin = self._gpu_hit(request)
            load = self._tier_hit(request, hit_tokens)
            load_tokens = load.num_tokens
            computed = hit_tokens + load_tokens
            num_new = min(request.num_tokens - computed, budget)
            hit_blocks = max(0, hit_tokens // block - request.shared_blocks)
            shared_hit = min(hit_tokens // block, request.shared_blocks)
            needed = self.blocks_for(request, computed + num_new) - hit_blocks
            must_fit = needed
            if self.config.reserve_full_prompt:
                must_fit = self.blocks_for(request, request.num_tokens) - hit_blocks
            # Cached blocks sitting in the free queue count as free: hitting them uses them up.
            hit_from_free = 0 if from_pin else hit_blocks
            if self._must_wait_for_reserve(request):
                break
            if not self._make_room(request, must_fit + hit_from_free, plan, shared_hit):
                break
            if from_pin and not self.retention.holds(request.job_id):
                # Its own pin gave way (the idle rule takes the latest pin, whoever's): its blocks are free
                # and still cached, so the hit now comes out of the free queue, as in vLLM, where
                # ``allocate_slots`` takes the hit blocks back after the pin released them.
                from_pin = False
                if not self._make_room(request, must_fit + hit_blocks, plan, shared_hit):
                    break
            self.waiting.pop()
            self.tier_queried_tokens += request.num_tokens - hit_tokens
            if request.shared_segments:
                request.shared_hold = self.pool.hold_shared(request.shared_segments, shared_hit)
            self._take_hit(request, hit_blocks, from_pin, plan)
            self.pool.allocate(needed)
            request.num_blocks += needed
            request.num_computed = computed
            self.running.append(request)
            if request.cached_tokens is None:
                request.cached_tokens = computed
                plan.admitted.append(request)
            if load_tokens and self.tier_mechanism.loads_beside_forward:
                # The request computes once its load has landed.
                plan.async_loads.append(load)
                continue
            if load_tokens:
                plan.loads.append(load)
            plan.scheduled.append(Scheduled(request, num_new, computed))
            budget -= num_new

    # Blocks.
    def blocks_for(self, request: SimRequest, num_tokens: int) -> int:
        return max(0, -(-num_tokens // self.config.block_size) - request.shared_blocks)

    def shared_cost_of_running(self, request: SimRequest) -> int:
        """What a running request's every room check counts for its shared segments besides its new blocks."""
        return self._shared_cost(request, 0)

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

    def _gpu_hit(self, request: SimRequest) -> tuple[int, bool]:
        """Tokens of ``request``'s prompt found in the GPU prefix cache (whole blocks, never the last token,
        as vLLM), and whether a pin holds them: the shared prefix where it is computed, then the job's own
        chain (chained hashes: only after the whole shared prefix)."""
        block, own = self.config.block_size, self.pool.cached_blocks(request.job_id)
        if request.max_job_hit_blocks is not None:
            own = min(own, request.max_job_hit_blocks)
        warm = self.pool.shared_hit(request.shared_segments)[0] if request.shared_segments else request.shared_blocks
        hit = warm + own if warm == request.shared_blocks else warm
        from_pin = self.retention.holds(request.job_id)
        return min(hit, (request.num_tokens - 1) // block) * block, from_pin

    def _tier_hit(self, request: SimRequest, gpu_hit_tokens: int) -> Load:
        """Tokens beyond the GPU hit that the CPU tier can load instead of recompute (whole blocks)."""
        found = self.tier.lookup(request.job_id, self._tier_segments(request))
        request.saved_tokens = min(found.tokens, request.prompt_tokens)
        usable = min(found.tokens, request.num_tokens - 1) // self.config.block_size * self.config.block_size
        return Load(request, max(0, usable - gpu_hit_tokens), max(0, usable - max(found.fast_tokens, gpu_hit_tokens)))

    def _take_hit(self, request: SimRequest, hit_blocks: int, from_pin: bool, plan: StepPlan) -> None:
        if from_pin:
            pin = self.retention.take_for_next_turn(request.job_id)
            # The next turn now references the pinned blocks; only the uncached tail block goes back, and the
            # shared segments the pin held (the next turn took its own references first).
            self.pool.release_uncached(len(pin.blocks) - hit_blocks)
            self._release_pinned_shared(pin.job_id)
            plan.unpins.append(Release(pin, UnpinReason.NEXT_TURN))
        else:
            self.pool.touch(request.job_id, hit_blocks)
        request.num_blocks = hit_blocks

    def _allocate(self, request: SimRequest, num_blocks: int, plan: StepPlan) -> bool:
        """``num_blocks`` more for ``request``, pins giving way under pressure; False (nothing allocated) if
        even that leaves too few free."""
        if not self._make_room(request, num_blocks, plan):
            return False
        if num_blocks > 0:
            self.pool.allocate(num_blocks)
            request.num_blocks += num_blocks
        return True

    def _make_room(self, request: SimRequest, num_blocks: int, plan: StepPlan, num_shared_hit: int = 0) -> bool:
        """Release pins by Continuum's pressure rule until ``num_blocks`` are free for ``request``, and what its
        shared segments take (``num_shared_hit`` of them a hit; what that costs changes as pins give theirs
        back); False when the rule lets no more pins go and they are still not free. Allocates nothing, and
        what the pins gave back stays released either way, as in the plugin (where vLLM's own allocation
        follows)."""
        while num_blocks + self._shared_cost(request, num_shared_hit) > self.pool.num_free:
            victim = self._take_pressure_victim(request)
            if victim is None:
                return False
            plan.unpins.append(self._release(victim, UnpinReason.PRESSURE))
        return True

    def _shared_cost(self, request: SimRequest, num_shared_hit: int) -> int:
        return self.pool.shared_cost(request.shared_segments, num_shared_hit) if request.shared_segments else 0

    def _take_pressure_victim(self, request: SimRequest) -> Pin | None:
        num_others_running = len(self.running) - (request in self.running)
        return self.retention.take_pressure_victim(request, num_others_running)

    def _must_wait_for_reserve(self, request: SimRequest) -> bool:
        return self.retention.must_wait_for_reserve(request, self.pool.num_free, self.running, self.config.block_size)

    def _preempt(self, request: SimRequest) -> None:
        self.num_preemptions += 1
        self._free(request)
        request.num_computed = 0
        request.ready_at = 0.0
        self.waiting.prepend(request)

    def _cached_blocks_of(self, request: SimRequest) -> int:
        """Full blocks of the request's own chain whose KV is computed (they are hashed and cached)."""
        full = request.num_computed // self.config.block_size - request.shared_blocks
        return max(0, min(full, request.num_blocks))

    def _free(self, request: SimRequest) -> None:
        if request.num_blocks:
            self.pool.free(request.job_id, request.num_blocks, self._cached_blocks_of(request))
        request.num_blocks = 0
        if request.shared_segments:
            self.pool.release_shared(request.shared_hold)
            request.shared_hold = SharedHold()

    def _release_pinned_shared(self, job_id: str) -> None:
        hold = self._pinned_shared.pop(job_id, None)
        if hold is not None:
            self.pool.release_shared(hold)

    def finish(self, request: SimRequest, now: float) -> list[Release]:
        """The request's last token is out: its blocks are freed, or pinned until the job's next turn; the
        pins that pin replaced, released."""
        self.running.remove(request)
        request.done = True
        if not self.retention.keeps_finished(request, self.config.block_size):
            self._free(request)
            return []
        self.pool.hold(request.job_id, self._cached_blocks_of(request))
        replaced = self.retention.pin(request, range(request.num_blocks), now)
        released = [self._release(pin, UnpinReason.REPLACED) for pin in replaced]
        request.num_blocks = 0
        if request.shared_segments:  # the pin holds them too, as vLLM's pinned blocks include the shared prefix
            self._pinned_shared[request.job_id] = request.shared_hold
            request.shared_hold = SharedHold()
        return released

    def _release(self, pin: Pin, reason: UnpinReason) -> Release:
        self.pool.free(pin.job_id, len(pin.blocks), min(self.pool.cached_blocks(pin.job_id), len(pin.blocks)))
        self._release_pinned_shared(pin.job_id)
        return Release(pin, reason)

    # The CPU tier.
    def save_prompt(self, request: SimRequest, num_new: int, context_before: int) -> int:
        """Save the prompt tokens this step computed that the tier does not have yet, including a GPU hit
        the tier lost (as LMCache stores everything past its own hit); decode tokens are not saved.
        Returns how many tokens were saved."""
        computed = min(context_before + num_new, request.prompt_tokens)
        if not self.tier.has_unsaved(request.saved_tokens, computed):
            return 0
        copied = self.tier.save_new(request.job_id, self._tier_segments(request), request.saved_tokens, computed)
        if copied:
            request.saved_tokens = computed
        return copied

    def _tier_segments(self, request: SimRequest) -> tuple[tuple[str, int], ...]:
        """A replay's shared segments in the tier's unit, tokens."""
        return tuple((key, num_blocks * self.config.block_size) for key, num_blocks in request.shared_segments)
