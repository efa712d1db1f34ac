"""Continuum for vLLM v1: keep an agent job's KV pinned across its tool-call gap.

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
FCFS. On GPU, vLLM's async scheduling must be off (``--no-async-scheduling``) for this class; the CPU
engine never uses it.
"""

from __future__ import annotations

import time
from typing import Any

from orchestrator.replica.schedulers.pins import (
    PINNED_PRIORITY_OFFSET,
    ContinuumConfig,
    Pin,
    PinTable,
)
from orchestrator.replica.schedulers.tracing import JobTag, TracingScheduler


class ContinuumScheduler(TracingScheduler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pins = PinTable(ContinuumConfig.from_env())
        allocate = self.kv_cache_manager.allocate_slots

        def allocate_or_take_pins(request, *alloc_args, **alloc_kwargs):
            if self._must_wait_for_reserve(request):
                return None
            blocks = allocate(request, *alloc_args, **alloc_kwargs)
            while blocks is None:
                victim = self._pressure_victim(request)
                if victim is None:
                    break
                self._release(victim, "pressure")
                blocks = allocate(request, *alloc_args, **alloc_kwargs)
            return blocks

        # Pins give way at the one place vLLM finds out memory is short, inside this very step.
        self.kv_cache_manager.allocate_slots = allocate_or_take_pins

    @property
    def num_pinned_blocks(self) -> int:
        return self.pins.num_pinned_blocks

    def add_request(self, request: Any) -> None:
        tag = JobTag(request)
        if tag.job_id is not None:
            self.pins.on_turn_arrived(tag.job_id, request.arrival_time)
            if self.pins.config.pinned_first and tag.job_id in self.pins:
                request.priority = PINNED_PRIORITY_OFFSET + tag.job_index
        super().add_request(request)

    def schedule(self, *args, **kwargs):
        waiting_jobs = (JobTag(request).job_id for request in self.waiting) if self.pins.config.hold_while_waiting else ()
        for pin in self.pins.take_expired(time.time(), waiting_jobs):
            self._release(pin, "ttl")
        output = super().schedule(*args, **kwargs)
        for new in output.scheduled_new_reqs:
            request = self.requests.get(new.req_id)
            job_id = JobTag(request).job_id if request is not None else None
            pin = self.pins.take(job_id) if job_id is not None else None
            if pin is not None:
                self._release(pin, "next_turn")
        return output

    def _must_wait_for_reserve(self, request: Any) -> bool:
        """A new job's first admission waits while it would eat into the pinned jobs' reserve."""
        tag = JobTag(request)
        if tag.job_id is None or tag.job_id in self.pins or request in self.running or request.num_computed_tokens:
            return False
        if tag.turn not in (None, 1):
            return False
        needed = -(-request.num_tokens // self.block_size)
        running_job_blocks = [
            -(-running.num_tokens // self.block_size) for running in self.running if not JobTag(running).is_last
        ]
        return self.free_blocks() - needed < self.pins.reserved_blocks(running_job_blocks)

    def retain_finished_blocks(self, request: Any, tag: JobTag) -> bool:
        if tag.job_id is None:
            return False
        if tag.is_last:
            self.pins.forget_job(tag.job_id)
            self.pins.on_job_finished(-(-request.num_tokens // self.block_size))
            return False
        blocks = self.kv_cache_manager.pop_blocks_for_free(request)
        for replaced in self.pins.pin(tag.job_id, tag.job_index, blocks, time.time()):
            self._release(replaced, "replaced")
        return True

    def reset_prefix_cache(self, *args, **kwargs) -> bool:
        for pin in self.pins.reset():
            self._release(pin, "reset")
        return super().reset_prefix_cache(*args, **kwargs)

    def _pressure_victim(self, request: Any) -> Pin | None:
        tag = JobTag(request)
        others_running = len(self.running) - (request in self.running)
        return self.pins.pressure_victim(tag.job_id, tag.job_index, others_running)

    def _release(self, pin: Pin, reason: str) -> None:
        # Tail blocks first, as vLLM frees a request's blocks, so the shared prefix is evicted last.
        self.kv_cache_manager.block_pool.free_blocks(reversed(pin.blocks))
        self.trace.write(
            {
                "kind": "unpin",
                "t": time.time(),
                "job_id": pin.job_id,
                "reason": reason,
                "num_blocks": len(pin.blocks),
                "held_s": time.time() - pin.pinned_at,
                "free_blocks": self.free_blocks(),
            }
        )
