"""Continuum's pin table: which job holds which KV blocks across its tool-call gap, and until when (pure).

A pin keeps a finished turn's blocks referenced so the prefix cache cannot evict them before the job's next
turn arrives. The table decides expiry (a fixed TTL, or one estimated from the tool gaps it has seen) and
orders the pins for giving way under memory pressure (the youngest job's first, so older jobs keep their
place, as in program-level FCFS); ``rules`` holds the decisions built on it. It never touches vLLM
objects itself: blocks are opaque to it.

Iteration never happens over a structure that is being changed: every release first takes the victims
out, then hands them back to the caller to free.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.mechanisms.continuum.config import ContinuumConfig, TtlMode

# Added to a pinned job's priority so its waiting turn sorts before every unpinned request.
PINNED_PRIORITY_OFFSET = -(10**9)
_LEARNING_WEIGHT = 0.1


@dataclass
class Pin:
    job_id: str
    job_index: int
    blocks: Sequence[Any]
    pinned_at: float
    expires_at: float


@dataclass
class _GapHistory:
    last_finish_at: dict[str, float] = field(default_factory=dict)
    longest_by_job: dict[str, float] = field(default_factory=dict)
    recent: deque = field(default_factory=lambda: deque(maxlen=256))


class PinTable:
    def __init__(self, config: ContinuumConfig):
        self.config = config
        self._pins: dict[str, Pin] = {}
        self._gaps = _GapHistory()
        self._final_blocks: float | None = None  # moving average of a finished job's context, in blocks

    def on_job_finished(self, num_blocks: int) -> None:
        """Learn how large a job's context is at its last turn."""
        previous = self._final_blocks
        self._final_blocks = num_blocks if previous is None else previous + _LEARNING_WEIGHT * (num_blocks - previous)

    def reserved_blocks(self, running_job_blocks: Iterable[int] = ()) -> int:
        """Blocks to keep free so every job in flight (pinned, or running with ``running_job_blocks``) can
        grow to a finished job's size; 0 until a job has finished."""
        if not self.config.reserve_for_pinned or self._final_blocks is None:
            return 0
        sizes = [len(pin.blocks) for pin in self._pins.values()] + list(running_job_blocks)
        return round(sum(max(0.0, self._final_blocks - size) for size in sizes))

    def __len__(self) -> int:
        return len(self._pins)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._pins

    @property
    def num_pinned_blocks(self) -> int:
        return sum(len(pin.blocks) for pin in self._pins.values())

    def ttl_for(self, job_id: str) -> float:
        config = self.config
        if config.ttl_mode is TtlMode.FIXED:
            return config.ttl_s
        gap = self._gaps.longest_by_job.get(job_id)
        if gap is None and self._gaps.recent:
            gap = statistics.median(self._gaps.recent)
        if gap is None:
            return config.ttl_s
        return min(config.adaptive_max_s, config.adaptive_factor * gap)

    def pin(self, job_id: str, job_index: int, blocks: Sequence[Any], now: float) -> list[Pin]:
        """Pin ``blocks`` for ``job_id``; returns any older pin of the same job, which the caller must free."""
        self._gaps.last_finish_at[job_id] = now
        replaced = self._pins.pop(job_id, None)
        self._pins[job_id] = Pin(job_id, job_index, blocks, now, now + self.ttl_for(job_id))
        return [replaced] if replaced else []

    def on_turn_arrived(self, job_id: str, arrived_at: float) -> None:
        """A job's next turn arrived: learn its tool gap for the adaptive TTL."""
        finished_at = self._gaps.last_finish_at.get(job_id)
        if finished_at is None:
            return
        gap = max(0.0, arrived_at - finished_at)
        self._gaps.longest_by_job[job_id] = max(gap, self._gaps.longest_by_job.get(job_id, 0.0))
        self._gaps.recent.append(gap)

    def forget_job(self, job_id: str) -> None:
        """The job's last turn finished: drop what was learned about it."""
        self._gaps.last_finish_at.pop(job_id, None)
        self._gaps.longest_by_job.pop(job_id, None)

    def next_expiry(self) -> float | None:
        return min((pin.expires_at for pin in self._pins.values()), default=None)

    def take(self, job_id: str) -> Pin | None:
        return self._pins.pop(job_id, None)

    def take_expired(self, now: float, waiting_jobs: Iterable[str] = ()) -> list[Pin]:
        """Pins past their TTL; with ``hold_while_waiting``, not those of ``waiting_jobs`` (consumed only then,
        so a lazy iterable costs nothing otherwise)."""
        held = set(waiting_jobs) if self.config.hold_while_waiting else set()
        expired = [job_id for job_id, pin in self._pins.items() if pin.expires_at <= now and job_id not in held]
        return [self._pins.pop(job_id) for job_id in expired]

    def take_latest(self) -> Pin | None:
        """The most recently pinned pin, taken out; None when the table is empty."""
        if not self._pins:
            return None
        latest = max(self._pins.values(), key=lambda pin: pin.pinned_at)
        return self._pins.pop(latest.job_id)

    def take_victim(self, exclude_job_id: str | None = None, younger_than: int | None = None) -> Pin | None:
        """The pin to give up under pressure: the youngest job's (highest arrival index), never
        ``exclude_job_id``'s, and with ``younger_than`` only a job whose index is above it."""
        candidates = [
            pin
            for pin in self._pins.values()
            if pin.job_id != exclude_job_id and (younger_than is None or pin.job_index > younger_than)
        ]
        if not candidates:
            return None
        victim = max(candidates, key=lambda pin: (pin.job_index, pin.pinned_at))
        return self._pins.pop(victim.job_id)

    def reset(self) -> list[Pin]:
        """Forget everything (pins and what was learned about jobs) and return the pins to release.

        A replica serves several cells in turn and job ids repeat across cells with the same seed, so
        anything kept here would carry one cell's history into the next.
        """
        pins = list(self._pins.values())
        self._pins.clear()
        self._gaps = _GapHistory()
        self._final_blocks = None
        return pins
