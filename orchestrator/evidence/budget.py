"""The evidence run's time budget: a stage starts only when its estimate fits in what is left (pure but for the
clock, which tests replace).

The estimates are upper-leaning guesses before anything ran, then what the run measured: after a server start
the next is estimated at the latest one with a fifth more (the first start on a GPU compiles the model and fills
the compile cache, which every later start of the same model loads instead). A cell's load is its arrival window
plus the tail of its last jobs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.workload.spec import WorkloadSpec

# Before anything is measured. A GPU's first start compiles the model and captures its CUDA graphs (minutes for an
# 8B model on a cold cache); the CPU engine starts eager.
FIRST_START_S = {"gpu": 240.0, "cpu": 60.0}
DOCTOR_S = 30.0  # two fresh interpreters importing torch and vLLM
START_SLACK = 1.2  # the next start against the latest one
RESET_S = 10.0  # the proof of a clean reset after a cell: two canary requests
PROFILE_S = 15.0  # reading a trace and one least-squares fit
TURN_S = {"gpu": 1.0, "cpu": 2.0}  # a generous turn of the source study's workload, queueing included


@dataclass
class Budget:
    """``total_s`` seconds from the moment it is made; ``clock`` is ``time.monotonic`` but in tests."""

    total_s: float
    device: str  # "gpu" or "cpu": which first-start estimate applies
    first_start_s: float | None = None  # the first start's estimate where a caller knows better than FIRST_START_S
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    latest_start_s: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def left_s(self) -> float:
        return self.total_s - (self.clock() - self.started)

    def refusal(self, estimate_s: float) -> str | None:
        """Why a stage estimated at ``estimate_s`` must not start now, or None when it fits."""
        left = self.left_s()
        if estimate_s <= left:
            return None
        return f"needs about {estimate_s:.0f} s, {max(0.0, left):.0f} s of the {self.total_s:.0f} s budget left"

    def record_start(self, seconds: float) -> None:
        self.latest_start_s = seconds

    def start_estimate_s(self) -> float:
        if self.latest_start_s is None:
            return self.first_start_s if self.first_start_s is not None else FIRST_START_S[self.device]
        return self.latest_start_s * START_SLACK

    def cell_estimate_s(self, workload: WorkloadSpec, needs_start: bool) -> float:
        """A cell: its server's start when it needs one, its load, and the reset proven after it."""
        means = workload.mean_shape()
        load = workload.arrival_window_s + means.turns * (means.tool_time_s + TURN_S[self.device])
        return (self.start_estimate_s() if needs_start else 0.0) + load + RESET_S
