"""The simulated KV block pool: vLLM v1's prefix cache at block granularity, stored as runs (pure).

What vLLM does, and what this reproduces exactly for the agent workload:

- A block holds 16 tokens; a full block is cached under a hash chained from every block before it, so a
  request hits the longest run of cached blocks from the start of its prompt.
- Freed blocks go to the tail of one LRU free queue (a request's blocks tail first) and allocation pops
  from its head, evicting whatever the popped block cached. A cached block that is hit is taken out of
  the queue again. vLLM counts cached free blocks as free.

Why runs instead of blocks: in this workload a job's prompts only share prefixes with its own earlier
turns (tool outputs are unique per job and turn) and with the system prompt. So a job's cached blocks are
always blocks ``0..k-1`` of its chain, freed together as one run that the queue eats from its tail end,
which is the same state as vLLM's block-by-block queue in O(1) per request instead of O(blocks). The
system prompt's blocks are referenced by almost every request at every moment, so they are held for the
whole run and always hit.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass


@dataclass
class _FreeRun:
    """Consecutive free blocks in the LRU queue: ``job``'s cached blocks, or uncached ones (``job`` None)."""

    job: str | None
    count: int


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

    def _evict(self, job: str, num_blocks: int, run: _FreeRun) -> None:
        self.evicted_blocks += num_blocks
        remaining = self._cached.get(job, 0) - num_blocks
        if remaining > 0:
            self._cached[job] = remaining
        else:
            self._cached.pop(job, None)
        if run.count == 0 and self._free_run.get(job) is run:
            del self._free_run[job]


class CpuTier:
    """A CPU KV tier (LMCache's local CPU backend, vLLM's native offload): each job's saved prefix, in
    tokens, evicted least recently used first once ``capacity_tokens`` is exceeded.

    A job's entry is evicted whole: its chunks are keyed by chained hashes too, so a prefix that has lost
    its first chunk is worthless, and LRU order takes a job's older (earlier) chunks first.
    """

    def __init__(self, capacity_tokens: int):
        self.capacity_tokens = capacity_tokens
        self._saved: OrderedDict[str, int] = OrderedDict()
        self._used = 0
        self.evicted_tokens = 0

    @property
    def used_tokens(self) -> int:
        return self._used

    def saved_tokens(self, job: str) -> int:
        return self._saved.get(job, 0)

    def hit(self, job: str) -> int:
        """The saved prefix of ``job``, marked recently used."""
        if job not in self._saved:
            return 0
        self._saved.move_to_end(job)
        return self._saved[job]

    def save(self, job: str, num_tokens: int) -> None:
        """Extend ``job``'s saved prefix to ``num_tokens``; a prefix larger than the tier is not kept."""
        previous = self._saved.pop(job, 0)
        self._used -= previous
        if num_tokens > self.capacity_tokens:
            self.evicted_tokens += previous
            return
        size = max(previous, num_tokens)
        while self._used + size > self.capacity_tokens:
            _, evicted = self._saved.popitem(last=False)
            self._used -= evicted
            self.evicted_tokens += evicted
        self._saved[job] = size
        self._used += size
