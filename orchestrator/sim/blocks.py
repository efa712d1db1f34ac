"""The simulated KV block pool: vLLM v1's prefix cache at block granularity, stored as runs (pure).

What vLLM does, and what this reproduces exactly for the agent workload:

- A block holds 16 tokens; a full block is cached under a hash chained from every block before it, so a
  request hits the longest run of cached blocks from the start of its prompt.
- Freed blocks go to the tail of one LRU free queue (a request's blocks tail first) and allocation pops
  from its head, evicting whatever the popped block cached. A cached block that is hit is taken out of
  the queue again. vLLM counts cached free blocks as free.

Why runs instead of blocks: in the parametric workload a job's prompts only share prefixes with its own earlier
turns (tool outputs are unique per job and turn) and with the system prompt. So a job's cached blocks are
always blocks ``0..k-1`` of its chain, freed together as one run that the queue eats from its tail end,
which is the same state as vLLM's block-by-block queue in O(1) per request instead of O(blocks). The
system prompt's blocks are referenced by almost every request at every moment, so they are held for the
whole run and always hit.

A replayed trace declares blocks that several jobs send (tool definitions, a shared context, another session's
prompt). Those are a hashed cache shared by all jobs, kept as segments: the engine blocks whose last token lies in
one declared block, cached under that block's id (ids are chained, so an id names its whole prefix, as vLLM's
block hashes do). A segment is referenced by every request (or pin) that holds it, goes to the tail of the same
LRU free queue as one run when the last of them lets go, and is eaten from its tail end there like any chain:
cross-job reuse evicts under pressure like everything else, in O(segments) per request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.mechanisms.request import SharedHold


@dataclass
class _FreeRun:
    """Consecutive free blocks in the LRU queue: ``job``'s cached blocks, a shared segment's, or uncached ones
    (both None)."""

    job: str | None
    count: int
    segment: _Segment | None = None


@dataclass(eq=False)
class _Segment:
    """A declared shared block's engine blocks: its leading ``cached`` are cached; ``refs`` holders keep them out
    of the free queue, where they sit as ``free_run`` when nobody holds them."""

    key: str
    cached: int
    refs: int = 0
    free_run: _FreeRun | None = None


class BlockPool:
    """GPU KV blocks: how many are free, and how many of each job's chain are still cached.

    A job's cached blocks are either held (by its running request or a pin) or sitting as one run in the
    free queue; ``cached_blocks(job)`` counts both.
    """

    def __init__(self, num_blocks: int, num_shared_blocks: int = 0):
        if num_shared_blocks >= num_blocks:
            raise ValueError(f"a pool of {num_blocks} blocks cannot hold the {num_shared_blocks} shared prefix blocks")
        self.num_blocks = num_blocks
        self.num_shared_blocks = num_shared_blocks
        self._num_held = num_shared_blocks
        self._queue: deque[_FreeRun] = deque([_FreeRun(None, num_blocks - num_shared_blocks)])
        self._cached: dict[str, int] = {}  # job -> cached blocks of its chain (held or free)
        self._free_run: dict[str, _FreeRun] = {}  # job -> its run in the queue, when its blocks are free
        self._segments: dict[str, _Segment] = {}  # declared shared block id -> its cached engine blocks
        self.evicted_blocks = 0

    @property
    def num_free(self) -> int:
        return self.num_blocks - self._num_held

    def cached_blocks(self, job: str) -> int:
        return self._cached.get(job, 0)

    def touch(self, job: str, num_blocks: int) -> None:
        """A request takes the first ``num_blocks`` of ``job``'s free cached blocks (its prefix hit) out of
        the free queue. Cached blocks past what the prompt can use no longer extend the job's chain and
        are left as uncached free blocks."""
        run = self._free_run.pop(job, None)
        if run is None:
            return
        taken = min(num_blocks, run.count)
        self._num_held += taken
        run.count -= taken
        if run.count:
            run.job = None
        self._cached[job] = taken

    def allocate(self, num_blocks: int) -> bool:
        """Take ``num_blocks`` from the head of the free queue, evicting what they cached; False if short."""
        if num_blocks > self.num_free:
            return False
        self._num_held += num_blocks
        while num_blocks:
            run = self._queue[0]
            taken = min(num_blocks, run.count)
            run.count -= taken
            num_blocks -= taken
            if run.job is not None and taken:
                self._evict(run.job, taken, run)
            elif run.segment is not None and taken:
                self._evict_segment(run.segment, taken)
            if run.count == 0:
                self._queue.popleft()
        return True

    def free(self, job: str, num_blocks: int, num_cached: int) -> None:
        """Return a request's (or a pin's) ``num_blocks``, of which the chain's first ``num_cached`` are
        full and hashed, so they stay cached until evicted; the rest are uncached and go first."""
        self._num_held -= num_blocks
        uncached = num_blocks - num_cached
        if uncached > 0:
            self._queue.append(_FreeRun(None, uncached))
        if num_cached > 0:
            run = _FreeRun(job, num_cached)
            self._queue.append(run)
            self._free_run[job] = run
            self._cached[job] = num_cached
        else:
            self._cached.pop(job, None)

    def hold(self, job: str, num_cached: int) -> None:
        """The job's first ``num_cached`` blocks are cached but stay held (a pin keeps them)."""
        self._cached[job] = num_cached

    def release_uncached(self, num_blocks: int) -> None:
        """Held blocks that cache nothing go back to the free queue."""
        if num_blocks > 0:
            self._num_held -= num_blocks
            self._queue.append(_FreeRun(None, num_blocks))

    # Shared segments: ``segments`` are a prompt's declared shared blocks, in order, as (id, engine blocks).
    def shared_hit(self, segments: Sequence[tuple[str, int]]) -> tuple[int, int]:
        """Engine blocks cached from the start of ``segments`` (up to the first one not whole), and how many of
        them sit in the free queue (hitting those uses up free blocks)."""
        hit = from_free = 0
        for key, size in segments:
            segment = self._segments.get(key)
            if segment is None:
                break
            hit += segment.cached
            from_free += 0 if segment.refs else segment.cached
            if segment.cached < size:
                break
        return hit, from_free

    def shared_cost(self, segments: Sequence[tuple[str, int]], num_hit: int) -> int:
        """Free blocks that ``hold_shared(segments, num_hit)`` will use: the hit ones sitting in the free queue
        and every block it allocates."""
        return self._walk_shared(segments, num_hit, apply=False)[0]

    def hold_shared(self, segments: Sequence[tuple[str, int]], num_hit: int) -> SharedHold:
        """A request takes its shared prefix, of which the first ``num_hit`` blocks are a cache hit: the segments
        it hits are referenced (taken out of the free queue where nobody held them), the rest get new blocks that
        are cached under their ids, or kept private where the id is cached already (vLLM caches a hash once).
        The caller has made room: ``shared_cost`` blocks are free."""
        return self._walk_shared(segments, num_hit, apply=True)[1]

    def release_shared(self, hold: SharedHold) -> None:
        """A holder lets go: each segment nobody else holds goes to the free queue, the prompt's last one first
        (nearest the head, as vLLM frees a request's blocks), after the private copies."""
        if hold.num_private:
            self.release_uncached(hold.num_private)
        for key in reversed(hold.keys):
            segment = self._segments[key]
            segment.refs -= 1
            if segment.refs == 0:
                self._num_held -= segment.cached
                segment.free_run = _FreeRun(None, segment.cached, segment)
                self._queue.append(segment.free_run)

    def shared_cached_blocks(self, key: str) -> int:
        segment = self._segments.get(key)
        return segment.cached if segment else 0

    def _walk_shared(self, segments: Sequence[tuple[str, int]], num_hit: int, apply: bool) -> tuple[int, SharedHold]:
        cost = num_private = 0
        keys = []
        hitting = True
        for key, size in segments:
            segment = self._segments.get(key)
            if hitting and segment is not None and num_hit > 0:
                # Within the hit: referenced. A hit that ends inside it (the prompt's last token is never a hit)
                # still holds it, and recomputes the blocks past the hit as private copies.
                used = min(segment.cached, num_hit)
                num_hit -= used
                copies, missing = segment.cached - used, size - segment.cached
                cost += copies + missing + (0 if segment.refs else segment.cached)
                num_private += copies
                if apply:
                    self._take_segment(segment, missing)
                    self.allocate(copies)
                    keys.append(key)
                hitting = used == size
                continue
            # Past the hit: computed anew, cached under its id unless the id is cached already.
            hitting = False
            cost += size
            if segment is not None:
                num_private += size
            if apply:
                self.allocate(size)
                if segment is None:
                    self._segments[key] = _Segment(key, size, refs=1)
                    keys.append(key)
        return cost, SharedHold(tuple(keys), num_private)

    def _take_segment(self, segment: _Segment, missing: int) -> None:
        """Reference ``segment``, out of the free queue if it sat there, and make it whole with ``missing`` new
        blocks (the free ones at the head of the queue, evicting what they cached)."""
        if segment.refs == 0 and segment.free_run is not None:
            segment.free_run.count = 0
            segment.free_run = None
            self._num_held += segment.cached
        segment.refs += 1
        if missing:
            self.allocate(missing)
            segment.cached += missing

    def _evict_segment(self, segment: _Segment, num_blocks: int) -> None:
        self.evicted_blocks += num_blocks
        segment.cached -= num_blocks
        if segment.cached == 0:
            segment.free_run = None
            del self._segments[segment.key]

    def _evict(self, job: str, num_blocks: int, run: _FreeRun) -> None:
        self.evicted_blocks += num_blocks
        remaining = self._cached.get(job, 0) - num_blocks
        if remaining > 0:
            self._cached[job] = remaining
        else:
            self._cached.pop(job, None)
        if run.count == 0 and self._free_run.get(job) is run:
            del self._free_run[job]
