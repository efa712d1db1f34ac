"""Continuum for vLLM v1: keep an agent job's KV pinned across its tool-call gap.

This module is the vLLM glue; the decisions are made by ``mechanisms.continuum.rules`` (pure, shared with the
simulator).

When a turn that is not the job's last finishes, its blocks are taken from the request instead of freed
(they stay in the prefix cache, referenced, so nothing can evict them). The pin ends when:

- the job's next turn is admitted (it has hit the pinned blocks by then, so they stay referenced);
- its TTL expires (fixed, or adaptive from the job's observed tool gaps; see ``pins.ContinuumConfig``);
- an allocation would otherwise fail and a job younger than the allocating request's holds a pin (the
  youngest such pin goes first); older jobs' pins never give way to younger work, so a new job waits for
  blocks rather than evict a job in flight (Continuum's known turn-1/turn-2 spike), and a running request
  with no younger pin to take is preempted by vLLM as usual. ``admission_release=always`` lets any pin go;
- the prefix cache is reset.

Admission (beyond the public prototype, ``reserve_for_pinned``): a new job's first turn waits while
admitting it would leave fewer free blocks than the jobs in flight (pinned or running) are expected to grow
by until their last turn (a moving average of finished jobs' contexts), so jobs in flight rarely take each
other's pins.

The engine cannot deadlock: every pin expires within its TTL (bounded by ``adaptive_max_s`` in adaptive
mode), so an allocation blocked by pins waits at most that long.

Ordering: with ``pinned_first`` (and vLLM's priority scheduling, the client sending the job's arrival index
as priority), a waiting turn of a pinned job goes ahead of everything else, and the rest is program-level
FCFS.

Async scheduling. This class is the synchronous one; on GPU, where vLLM 0.32 schedules asynchronously by
default, the policies run ``async_variants.AsyncContinuumScheduler`` (this class over vLLM's
``AsyncScheduler``) and the pins need nothing beyond the fence below. From vLLM 0.32's code:

- Two steps in flight: ``EngineCore.step_with_batch_queue`` (v1/engine/core.py) schedules step N+1 before
  ``update_from_output`` processes step N. A turn that stops in step N on a stop or EOS token is normally in
  step N+1 already (``AsyncScheduler._update_after_schedule`` gave it a placeholder; ``Scheduler.schedule``
  skips the extra step only once ``max_tokens`` is certain). So when ``update_from_output`` -> ``_free_request`` ->
  ``_free_blocks`` -> ``_free_request_blocks`` (our hook, tracing.py) finishes it, ``num_output_placeholders``
  is 1: step N+1 still writes the KV of the turn's last token into its last slot, and the token it samples
  is discarded (``update_from_output`` skips a request no longer in ``self.requests``). An abort
  (``finish_requests``) can likewise arrive with steps in flight.
- Taking the blocks there with ``KVCacheManager.pop_blocks_for_free`` is what vLLM itself does when it must
  delay a free (``Scheduler._free_request_blocks``). The pin holds their references, so no other request can
  be given them while the step writes; stock vLLM puts them on the free queue at once.
- The slot being written lies past the cached frontier: ``AsyncScheduler._update_request_with_output`` caches
  blocks only up to ``num_computed_tokens - num_output_placeholders``, so no hashed block changes, and the
  next turn's prefix hit covers only blocks written by steps up to N. The next turn arrives only after the
  client got turn N's output, which ``update_from_output`` of step N emits; it is scheduled in step N+2 at the
  earliest, which the device runs after N+1. Its allocation takes references on the blocks it hits before
  ``schedule`` drops the pin's (``next_turn``), so that release frees only the blocks it did not hit. A job's
  turns never overlap, so no step of the same job uses a pin that is being released.
- Giving pinned blocks back (``BlockPool.free_blocks`` on TTL, next turn, pressure, reset) while a step that
  writes them may still run is what vLLM does with every finished request: a later write to a reused block
  is ordered after it on the device. vLLM's one exception applies here too: with a KV connector that loads
  into blocks (``kv_role`` consumer or both) and more than one batch in flight, ``Scheduler.__init__`` sets
  ``defer_block_free``, because such a load is not ordered against the in-flight write, and freed blocks wait
  on ``deferred_frees`` until ``processed_step_seq`` reaches the request's ``last_sched_seq``. ``_release`` does
  the same for a pin whose turn's last step is not processed yet (possible only while scheduling the step
  right after the pin was taken); a pressure release so delayed does not count towards the allocation. No
  policy combines pins with a connector yet, so this path is idle today.
- No double free: ``pop_blocks_for_free`` removes the request's block list (a later ``free`` of it finds
  nothing), the request leaves ``self.requests`` in ``_free_blocks``, and a pin leaves the table before its
  blocks are freed.
- The ``allocate_slots`` wrapper works the same: ``AsyncScheduler`` overrides only ``_update_after_schedule``
  and ``_update_request_with_output``; both allocations in ``Scheduler.schedule`` (running and waiting
  requests) call ``self.kv_cache_manager.allocate_slots``, replaced on the instance after vLLM's ``__init__``.
  A running request asks for its placeholders' slots too, as in stock vLLM.

Why ``allocate_slots`` is replaced on the instance. vLLM 0.32 has no documented hook that sees an allocation
fail (checked in v1/core/sched/scheduler.py, interface.py and kv_cache_manager.py):

- ``SchedulerInterface`` (the documented contract) has no allocation method, and ``SchedulerConfig.get_scheduler_cls``
  warns that even a custom scheduler class is not a public interface.
- ``Scheduler.__init__`` builds ``KVCacheManager`` directly, with no class option, so no subclass of it can
  be plugged in.
- The Scheduler methods called near the two ``allocate_slots`` calls are private and do other jobs:
  ``_request_blocks_can_be_freed`` is asked, in the running loop only, about the request vLLM is about to
  preempt (freeing pins there and answering False ends the loop instead of retrying the allocation);
  ``_handle_blocked_waiting_request`` runs before the prefix-cache lookup and a False skips to the next
  waiting request (the reserve must stop admission at the head, as a failed allocation does);
  ``_inflight_prefill_reserved_blocks`` reaches ``allocate_slots(reserved_blocks=...)`` only for asynchronous
  KV-connector loads.
- The documented way to keep a finished request's blocks (a KV connector returning True from
  ``request_finished``, freed when the worker reports ``finished_sending``) has no call at allocation failure.

So the wrapper stays, installed after vLLM's ``__init__``; every decision it makes is ``mechanisms.continuum.rules``'s.

The CPU engine never schedules asynchronously: ``CpuPlatform.check_and_update_config`` sets
``async_scheduling`` to False even when ``--async-scheduling`` is given (one batch in flight, so there the
async variant behaves like this class). tests/replica/test_async_continuum.py runs the async variant with
two steps in flight in-process and, with that reset undone, on the CPU engine.
"""

from __future__ import annotations

import time
from typing import Any

from orchestrator.mechanisms.continuum.config import ContinuumConfig
from orchestrator.mechanisms.continuum.pins import Pin, PinTable
from orchestrator.mechanisms.continuum.rules import (
    keeps_finished_blocks,
    must_wait_for_reserve,
    take_for_next_turn,
    take_pressure_victim,
    waiting_priority,
)
from orchestrator.records.scheduler_trace import Unpin, UnpinReason
from orchestrator.replica.schedulers.tracing import JobTag, TracingScheduler


class ContinuumScheduler(TracingScheduler):
    """vLLM glue for Continuum: reads a request's job tag and the block pool, asks ``mechanisms.continuum.rules``
    what to do, and carries it out on vLLM's objects. Invariant: a pin leaves ``self.pins`` before its blocks are given
    back, and they are given back once (to the free queue, or to ``deferred_frees`` behind an in-flight step)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pins = PinTable(ContinuumConfig.from_env())
        # Per pinned job: the last step that wrote its blocks (vLLM's ``last_sched_seq``; 0 unless vLLM defers
        # frees), so a release waits for that step as vLLM's own frees do. See "Async scheduling" above.
        self._pin_fences: dict[str, int] = {}
        allocate = self.kv_cache_manager.allocate_slots

        def allocate_or_take_pins(request, *alloc_args, **alloc_kwargs):
            if self._must_wait_for_reserve(request):
                return None
            blocks = allocate(request, *alloc_args, **alloc_kwargs)
            while blocks is None:
                victim = self._take_pressure_victim(request)
                if victim is None:
                    break
                if self._release(victim, UnpinReason.PRESSURE):  # a delayed release frees nothing this step
                    blocks = allocate(request, *alloc_args, **alloc_kwargs)
            return blocks

        # Pins give way at the one place vLLM finds out memory is short, inside this very step (no Scheduler
        # method is called there; see "Why allocate_slots is replaced on the instance" above).
        self.kv_cache_manager.allocate_slots = allocate_or_take_pins

    @property
    def num_pinned_blocks(self) -> int:
        return self.pins.num_pinned_blocks

    def add_request(self, request: Any) -> None:
        tag = JobTag(request)
        if tag.job_id is not None:
            self.pins.on_turn_arrived(tag.job_id, request.arrival_time)
            request.priority = waiting_priority(self.pins, tag, request.priority)
        super().add_request(request)

    def schedule(self, *args, **kwargs):
        waiting_jobs = (JobTag(request).job_id for request in self.waiting)
        for pin in self.pins.take_expired(time.time(), waiting_jobs):
            self._release(pin, UnpinReason.TTL)
        output = super().schedule(*args, **kwargs)
        for new in output.scheduled_new_reqs:
            request = self.requests.get(new.req_id)
            pin = take_for_next_turn(self.pins, JobTag(request).job_id) if request is not None else None
            if pin is not None:
                self._release(pin, UnpinReason.NEXT_TURN)
        return output

    def _must_wait_for_reserve(self, request: Any) -> bool:
        """A new job's first admission waits while it would eat into the jobs in flight's reserve; a running
        request (``allocate_slots`` serves both) never does."""
        if request in self.running:
            return False
        running_job_tokens = (running.num_tokens for running in self.running if not JobTag(running).is_last)
        return must_wait_for_reserve(
            self.pins, JobTag(request), num_computed_tokens=request.num_computed_tokens, num_tokens=request.num_tokens,
            num_free_blocks=self.free_blocks(), running_job_tokens=running_job_tokens, block_size=self.block_size,
        )  # fmt: skip

    def retain_finished_blocks(self, request: Any, tag: JobTag) -> bool:
        if not keeps_finished_blocks(self.pins, tag, request.num_tokens, self.block_size):
            return False
        blocks = self.kv_cache_manager.pop_blocks_for_free(request)
        for replaced in self.pins.pin(tag.job_id, tag.job_index, blocks, time.time()):
            self._release(replaced, UnpinReason.REPLACED)
        self._pin_fences[tag.job_id] = request.last_sched_seq
        return True

    def reset_prefix_cache(self, *args, **kwargs) -> bool:
        for pin in self.pins.reset():
            self._release(pin, UnpinReason.RESET)
        return super().reset_prefix_cache(*args, **kwargs)

    def _take_pressure_victim(self, request: Any) -> Pin | None:
        num_others_running = len(self.running) - (request in self.running)
        return take_pressure_victim(self.pins, JobTag(request), num_others_running)

    def _release(self, pin: Pin, reason: UnpinReason) -> bool:
        """Give ``pin``'s blocks back; False when they must wait for an in-flight step (vLLM then frees
        them in ``update_from_output`` once that step is processed)."""
        fence = self._pin_fences.pop(pin.job_id, 0)
        if self.defer_block_free and fence > self.processed_step_seq:
            # As Scheduler._free_request_blocks does; blocks in allocation order, freed tail first.
            self.deferred_frees.append((fence, list(pin.blocks)))
            released = False
        else:
            # Tail blocks first, as vLLM frees a request's blocks, so the shared prefix is evicted last.
            self.kv_cache_manager.block_pool.free_blocks(reversed(pin.blocks))
            released = True
        now = time.time()
        self.scheduler_trace.write(Unpin(t=now, job_id=pin.job_id, reason=reason, num_blocks=len(pin.blocks),
                               held_s=now - pin.pinned_at, free_blocks=self.free_blocks()))  # fmt: skip
        return released
