"""The evidence run's time budget: a stage starts only when its estimate fits in what is left (pure but for the
clock, which tests replace).

Cells are estimated by the cost model every budgeted run spends by (``budget.cost``): a start from the measured
starts of the place (the target GPU type, or cpu), or the caller's better figure, then the latest start the run
measured with a fifth more (the first start on a GPU compiles the model and fills the compile cache, which every
later start of the same model loads instead); a cell's load is its arrival window plus the tail of its last jobs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.budget.cost import CostModel
from orchestrator.gpus import CPU
from orchestrator.workload.spec import WorkloadSpec

DOCTOR_S = 30.0  # two fresh interpreters importing torch and vLLM
PROFILE_S = 15.0  # reading a trace and one least-squares fit


@dataclass
class Budget:
    """``total_s`` seconds from the moment it is made; ``clock`` is ``time.monotonic`` but in tests."""

    total_s: float
    place: str  # the target GPU type, or cpu: whose measured starts apply
    first_start_s: float | None = None  # the first start's estimate where a caller knows better than the table
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    costs: CostModel = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()
        self.costs = CostModel(first_start_s={self.place: self.first_start_s} if self.first_start_s else None)

    @property
    def device(self) -> str:
        return "cpu" if self.place == CPU else "gpu"

    def left_s(self) -> float:
        return self.total_s - (self.clock() - self.started)

    def refusal(self, estimate_s: float) -> str | None:
        """Why a stage estimated at ``estimate_s`` must not start now, or None when it fits."""
        left = self.left_s()
        if estimate_s <= left:
            return None
        return f"needs about {estimate_s:.0f} s, {max(0.0, left):.0f} s of the {self.total_s:.0f} s budget left"

    def record_start(self, seconds: float) -> None:
        self.costs.record_start(self.place, False, seconds)

    def start_estimate_s(self) -> float:
        return self.costs.start_s(self.place, tiered=False)

    def cell_estimate_s(self, workload: WorkloadSpec, needs_start: bool, predicted_span_s: float | None = None) -> float:
        """A cell: its server's start when it needs one, its load (its predicted span where the simulator gave one),
        and the reset proven after it."""
        return self.costs.cell_s(self.place, workload, self.device, predicted_span_s, tiered=False,
                                 needs_start=needs_start)
