"""A simulated tier's contents (pure): what a tier's ``sim_store`` gives the simulator's scheduler, which looks a
prompt up in it at admission and saves the prompt tokens each step computes (``sim.scheduler``).

``CpuTier`` is the one-level store, LRU over whole jobs: LMCache's local CPU backend and vLLM's native offload; a
tier with a level behind host memory wraps it (``lmcache_disk.DiskBackedStore``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple, Protocol


class TierHit(NamedTuple):
    """A prompt's saved prefix in a tier's store: ``tokens`` in all, the first ``fast_tokens`` of them in host memory
    (the rest on a slower level behind it, where the store has one)."""

    tokens: int
    fast_tokens: int


class CpuTier:
    """A CPU KV tier (LMCache's local CPU backend, vLLM's native offload): each job's saved prefix, in
    tokens, evicted least recently used first once ``capacity_tokens`` is exceeded.

    A job's entry is evicted whole: its chunks are keyed by chained hashes too, so a prefix that has lost
    its first chunk is worthless, and LRU order takes a job's older (earlier) chunks first. A replay's declared
    shared blocks are entries of their own, saved once under their ids whichever job computed them (the tier's
    chunk hashes do not know the job), and a job's entry then holds only what follows them (``*_chain``).
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

    def lookup(self, job: str, segments: Sequence[tuple[str, int]]) -> TierHit:
        """What the tier holds of a prompt of ``job`` that starts with the shared ``segments``, marked recently used."""
        found = self.hit_chain(job, segments)
        return TierHit(found, found)

    def save_new(self, job: str, segments: Sequence[tuple[str, int]], num_saved: int, num_tokens: int) -> int:
        """Every prompt token computed past what it saved before (as LMCache stores everything past its own hit)."""
        if not self.has_unsaved(num_saved, num_tokens):
            return 0
        self.save_chain(job, segments, num_tokens)
        return num_tokens - num_saved

    def has_unsaved(self, num_saved: int, num_tokens: int) -> bool:
        return num_tokens > num_saved

    def hit_chain(self, job: str, segments: Sequence[tuple[str, int]]) -> int:
        """The saved prefix of a prompt that starts with the shared ``segments`` (id, tokens), marked recently used:
        the segments saved from its start, then, behind all of them, ``job``'s own entry."""
        found = 0
        for key, num_tokens in segments:
            if (_SHARED, key) not in self._saved:
                return found
            self._saved.move_to_end((_SHARED, key))
            found += num_tokens
        return found + self.hit(job)

    def save_chain(self, job: str, segments: Sequence[tuple[str, int]], num_tokens: int) -> None:
        """Save the first ``num_tokens`` of a prompt that starts with the shared ``segments``: each whole segment
        under its id (once), the rest as ``job``'s entry."""
        done = 0
        for key, size in segments:
            if done + size > num_tokens:
                return
            done += size
            if (_SHARED, key) in self._saved:
                self._saved.move_to_end((_SHARED, key))
            else:
                self._put((_SHARED, key), size)
        if num_tokens > done:
            self.save(job, num_tokens - done)

    def save(self, job: str, num_tokens: int) -> None:
        """Extend ``job``'s saved prefix to ``num_tokens``; a prefix larger than the tier is not kept."""
        previous = self._saved.pop(job, 0)
        self._used -= previous
        if num_tokens > self.capacity_tokens:
            self.evicted_tokens += previous
            return
        self._put(job, max(previous, num_tokens))

    def _put(self, key: str | tuple[str, str], size: int) -> None:
        if size > self.capacity_tokens:
            return
        while self._used + size > self.capacity_tokens:
            _, evicted = self._saved.popitem(last=False)
            self._used -= evicted
            self.evicted_tokens += evicted
        self._saved[key] = size
        self._used += size


_SHARED = "shared"  # the tier's key of a declared shared block: (_SHARED, its id), apart from job ids


class TierStore(Protocol):
    """What keeps a simulated tier's saved prefixes (``CpuTier`` is the one-level store, ``EmptyStore`` no tier's)."""

    def lookup(self, job: str, segments: Sequence[tuple[str, int]]) -> TierHit:
        """What it holds of a prompt of ``job`` that starts with the shared ``segments``, marked recently used."""

    def save_new(self, job: str, segments: Sequence[tuple[str, int]], num_saved: int, num_tokens: int) -> int:
        """Save the first ``num_tokens`` of a prompt of ``job`` that starts with the shared ``segments``, of which
        ``num_saved`` were saved before; returns how many tokens it copied (0: none)."""

    def has_unsaved(self, num_saved: int, num_tokens: int) -> bool:
        """Whether ``save_new`` would copy anything of a prompt's first ``num_tokens`` with ``num_saved`` saved before."""


class EmptyStore(TierStore):
    """No tier: it holds nothing and saves nothing."""

    def lookup(self, job: str, segments: Sequence[tuple[str, int]]) -> TierHit:
        return TierHit(0, 0)

    def save_new(self, job: str, segments: Sequence[tuple[str, int]], num_saved: int, num_tokens: int) -> int:
        return 0

    def has_unsaved(self, num_saved: int, num_tokens: int) -> bool:
        return False
