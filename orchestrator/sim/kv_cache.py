"""The simulated KV cache, as vLLM's ``KVCacheManager`` is its scheduler's (pure): the block pool, a prompt's GPU
prefix hit, blocks allocated with pins giving way under pressure, a request's blocks freed (they stay cached) or
pinned at its end, and the pins released. The retention (``SimRetention``: Continuum's pins, or none) decides every
pin; this class carries its decisions out on the pool."""

from __future__ import annotations

from typing import NamedTuple

from orchestrator.mechanisms.continuum.pins import Pin
from orchestrator.mechanisms.request import SharedHold, SimRequest
from orchestrator.mechanisms.retention import SimRetention
from orchestrator.records.scheduler_trace import UnpinReason
from orchestrator.sim.blocks import BlockPool


class Release(NamedTuple):
    """A pin released, and why."""

    pin: Pin
    reason: UnpinReason


class SimKVCache:
    """A pool of ``num_blocks`` blocks of ``block_size`` tokens, ``num_shared_blocks`` of them the shared prefix
    held all run, and ``retention``'s pins in it."""

    def __init__(self, num_blocks: int, num_shared_blocks: int, block_size: int, retention: SimRetention):
        self.pool = BlockPool(num_blocks, num_shared_blocks)
        self.block_size, self.retention = block_size, retention
        self._pinned_shared: dict[str, SharedHold] = {}  # a pinned job's shared segments, held with its pin

    def blocks_for(self, request: SimRequest, num_tokens: int) -> int:
        return max(0, -(-num_tokens // self.block_size) - request.shared_blocks)

    def gpu_hit(self, request: SimRequest) -> tuple[int, bool]:
        """Tokens of ``request``'s prompt found in the GPU prefix cache (whole blocks, never the last token,
        as vLLM), and whether a pin holds them: the shared prefix where it is computed, then the job's own
        chain (chained hashes: only after the whole shared prefix)."""
        block, own = self.block_size, self.pool.cached_blocks(request.job_id)
        if request.max_job_hit_blocks is not None:
            own = min(own, request.max_job_hit_blocks)
        warm = self.pool.shared_hit(request.shared_segments)[0] if request.shared_segments else request.shared_blocks
        hit = warm + own if warm == request.shared_blocks else warm
        from_pin = self.retention.holds(request.job_id)
        return min(hit, (request.num_tokens - 1) // block) * block, from_pin

    def take_hit(self, request: SimRequest, hit_blocks: int, from_pin: bool) -> Release | None:
        """``request`` takes its ``hit_blocks`` cached blocks: out of its job's pin (released for the next turn)
        or out of the free queue."""
        request.num_blocks = hit_blocks
        if not from_pin:
            self.pool.touch(request.job_id, hit_blocks)
            return None
        pin = self.retention.take_for_next_turn(request.job_id)
        # The next turn now references the pinned blocks; only the uncached tail block goes back, and the
        # shared segments the pin held (the next turn took its own references first).
        self.pool.release_uncached(len(pin.blocks) - hit_blocks)
        self._release_pinned_shared(pin.job_id)
        return Release(pin, UnpinReason.NEXT_TURN)

    def allocate(self, request: SimRequest, num_blocks: int, others_running: int, unpins: list[Release]) -> bool:
        """``num_blocks`` more for ``request``, pins giving way under pressure; False (nothing allocated) if
        even that leaves too few free."""
        if not self.make_room(request, num_blocks, others_running, unpins):
            return False
        if num_blocks > 0:
            self.pool.allocate(num_blocks)
            request.num_blocks += num_blocks
        return True

    def make_room(self, request: SimRequest, num_blocks: int, others_running: int, unpins: list[Release],
                  num_shared_hit: int = 0) -> bool:  # fmt: skip
        """Release pins by Continuum's pressure rule (``others_running``: the running requests besides ``request``)
        until ``num_blocks`` are free for ``request``, and what its shared segments take (``num_shared_hit`` of
        them a hit; what that costs changes as pins give theirs back), each release added to ``unpins``; False when
        the rule lets no more pins go and they are still not free. Allocates nothing, and what the pins gave back
        stays released either way, as in the plugin (where vLLM's own allocation follows)."""
        while num_blocks + self.shared_cost(request, num_shared_hit) > self.pool.num_free:
            victim = self.retention.take_pressure_victim(request, others_running)
            if victim is None:
                return False
            unpins.append(self.release(victim, UnpinReason.PRESSURE))
        return True

    def shared_cost(self, request: SimRequest, num_shared_hit: int) -> int:
        """What ``request``'s shared segments take of the free blocks, ``num_shared_hit`` of them a hit."""
        return self.pool.shared_cost(request.shared_segments, num_shared_hit) if request.shared_segments else 0

    def free(self, request: SimRequest) -> None:
        """``request``'s blocks back to the pool, its computed ones still cached, and its shared segments let go."""
        if request.num_blocks:
            self.pool.free(request.job_id, request.num_blocks, self._cached_blocks_of(request))
        request.num_blocks = 0
        if request.shared_segments:
            self.pool.release_shared(request.shared_hold)
            request.shared_hold = SharedHold()

    def pin_finished(self, request: SimRequest, now: float) -> list[Release]:
        """The finished ``request``'s blocks pinned for its job's next turn (with its shared segments, as vLLM's
        pinned blocks include the shared prefix); the pins that pin replaced, released."""
        self.pool.hold(request.job_id, self._cached_blocks_of(request))
        replaced = self.retention.pin(request, range(request.num_blocks), now)
        released = [self.release(pin, UnpinReason.REPLACED) for pin in replaced]
        request.num_blocks = 0
        if request.shared_segments:
            self._pinned_shared[request.job_id] = request.shared_hold
            request.shared_hold = SharedHold()
        return released

    def release(self, pin: Pin, reason: UnpinReason) -> Release:
        self.pool.free(pin.job_id, len(pin.blocks), min(self.pool.cached_blocks(pin.job_id), len(pin.blocks)))
        self._release_pinned_shared(pin.job_id)
        return Release(pin, reason)

    def _cached_blocks_of(self, request: SimRequest) -> int:
        """Full blocks of the request's own chain whose KV is computed (they are hashed and cached)."""
        full = request.num_computed // self.block_size - request.shared_blocks
        return max(0, min(full, request.num_blocks))

    def _release_pinned_shared(self, job_id: str) -> None:
        hold = self._pinned_shared.pop(job_id, None)
        if hold is not None:
            self.pool.release_shared(hold)
