"""A stretch of pure decode steps, planned ahead in one go (pure).

Most of an hour of light traffic is a few requests decoding one token per step while nothing arrives, finishes or
changes the batch. Stepped one event at a time, each such step repeats the scheduler's whole walk to reach a decision
already known: every running request gets its next token. Here the engine plans those steps at once from a state in
which nothing but time can change the batch, and the loop applies them when the run ends, or as far as an event for
the replica reaches (``EngineCore.settle``), after which the engine schedules step by step again. The steps and what
they write are the ones stepping would have produced, to the bit: each step's time is summed in the same order from
the same cost model, and its blocks are allocated in the same order.

A run stops before the first step that could differ: one that would finish a request, need a block the free queue
cannot give without the scheduler's pressure rules (preemption, releasing pins), start at or after a pin's expiry,
or run while a request waits or a CPU-tier load is in flight. It is planned ``MAX_RUN_STEPS`` at a time, so an
event that cuts it short wastes little planning.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.mechanisms.request import SimRequest
from orchestrator.roofline.hardware import StepCost
from orchestrator.sim.scheduler import SimScheduler

MIN_RUN_STEPS = 2  # a shorter run saves nothing over stepping
MAX_RUN_STEPS = 256


@dataclass
class DecodeRun:
    """The batch and its planned steps: step ``j`` runs from ``starts[j]`` to ``ends[j]`` and leaves ``free_blocks[j]``
    free; ``allocations`` are the blocks it gives, as ``(step, place in the batch, blocks)`` in the order stepping
    would allocate them."""

    batch: list[SimRequest]
    context_tokens: int  # read by its first step; each later step reads one more per request
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    free_blocks: list[int] = field(default_factory=list)
    allocations: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def end(self) -> float:
        return self.ends[-1]


def plan_decode_run(scheduler: SimScheduler, cost: StepCost, now: float) -> DecodeRun | None:
    """The pure decode steps the engine would run from ``now`` if no event reached it first, or None when the next
    step is not one (or the run would be too short to matter)."""
    batch = scheduler.running
    config = scheduler.config
    if len(scheduler.waiting) or not batch or len(batch) > config.max_num_batched_tokens:
        return None
    for request in batch:
        if (request.num_tokens - request.num_computed != 1 or request.ready_at > now or request.num_output < 1
                or request.num_blocks != scheduler.kv.blocks_for(request, request.num_computed)):  # fmt: skip
            return None
        if scheduler.connector.store.has_unsaved(request.saved_tokens, request.prompt_tokens):
            return None
    num_steps = min(MAX_RUN_STEPS, min(request.output_tokens - request.num_output for request in batch) - 1)
    if num_steps < MIN_RUN_STEPS:
        return None
    expiry = scheduler.retention.next_expiry()
    # Each running request's room check (``SimScheduler._make_room``) also counts its shared segments, even when it
    # needs no new block: it can only fail once the free count has dropped.
    shared_costs = [scheduler.shared_cost_of_running(request) for request in batch]
    block_size = config.block_size
    num_free = scheduler.pool.num_free
    num_seqs = len(batch)
    context = sum(request.num_computed for request in batch) + num_seqs
    run = DecodeRun(list(batch), context)
    start = now
    free_dropped = True  # every check runs again after the free count drops
    for step in range(num_steps):
        if expiry is not None and start >= expiry:
            break
        # A request needs a block when its new token starts one (its context so far fills whole blocks).
        crossing = [index for index, request in enumerate(batch) if (request.num_computed + step) % block_size == 0]
        if (crossing or free_dropped) and not _fits(crossing, shared_costs, num_free):
            break
        free_dropped = bool(crossing)
        for index in crossing:
            run.allocations.append((step, index, 1))
        num_free -= len(crossing)
        # Each request's (query, key) pairs are its context including the new token, a whole number: their float
        # sum is exactly the context.
        end = start + cost.forward_s(num_seqs, float(context), context, num_seqs) + 0.0  # + its (nil) save stall
        run.starts.append(start)
        run.ends.append(end)
        run.free_blocks.append(num_free)
        context += num_seqs
        start = end
    return run if len(run.starts) >= MIN_RUN_STEPS else None


def _fits(crossing: list[int], shared_costs: list[int], num_free: int) -> bool:
    """The room checks of a step in which the requests at ``crossing`` each take a block, in batch order: every
    request's check sees the blocks taken before it."""
    taken = 0
    for index, shared_cost in enumerate(shared_costs):
        needed = 1 if index in crossing else 0
        if needed + shared_cost > num_free - taken:
            return False
        taken += needed
    return True
