"""What a budgeted run has spent and committed, and whether the next cell fits (pure; the driver and the plan
feed it).

Device time is counted per GPU type and in all: each attempt's wall time (its server's start included) times the
GPUs it holds. A cell starts only when its estimate fits what is left after what was spent and the estimates of the
cells still running; a type whose next cell does not fit stops there, and its cells are left for a later run, in the
same order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.budget.cost import CostModel, base_load_s, start_place
from orchestrator.budget.spec import GpuBudget
from orchestrator.policies import get_policy
from orchestrator.records.prediction import Prediction
from orchestrator.sweep.planning.cells import CellSpec


@dataclass(frozen=True)
class Commitment:
    gpu: str
    estimate_s: float  # of the whole attempt, per GPU it holds
    gpus: int


class Spending:
    def __init__(self, budget: GpuBudget, costs: CostModel, predictions: Mapping[str, Prediction]):
        self.budget = budget
        self.costs = costs
        self.predictions = predictions
        self.spent_s: dict[str, float] = {}  # per GPU type
        self.measured: dict[str, int] = {}  # attempts charged, per GPU type
        self._running: dict[str, Commitment] = {}

    def estimate_s(self, cell: CellSpec, needs_start: bool) -> float:
        """``cell``'s attempt, per GPU it holds: a start where it needs one, its load and the reset after it."""
        place = start_place(cell.engine.value, cell.gpu)
        return self.costs.cell_s(place, cell.workload, cell.device, self._predicted_span_s(cell),
                                 tiered=get_policy(cell.policy).has_cpu_tier, needs_start=needs_start,
                                 first=not self.costs.has_started(place))  # fmt: skip

    def left_s(self, gpu: str) -> float:
        """What is left for ``gpu``: of its own budget and of the budget for all, the less."""
        lefts = []
        if gpu in self.budget.by_type:
            lefts.append(self.budget.by_type[gpu] - self._committed_s(gpu))
        if self.budget.total_s is not None:
            lefts.append(self.budget.total_s - self._committed_s(None))
        return min(lefts) if lefts else 0.0

    def refusal(self, cell: CellSpec, needs_start: bool) -> str | None:
        """Why ``cell`` must not start now (the budget does not cover its type, or its estimate does not fit what
        is left), or None."""
        if not self.budget.measures(cell.gpu):
            return f"--gpu-budget {self.budget} gives {cell.gpu} no time"
        cost = self.estimate_s(cell, needs_start) * _gpus(cell)
        left = self.left_s(cell.gpu)
        if cost <= left:
            return None
        return f"the next {cell.gpu} cell needs about {cost:.0f} s, {max(0.0, left):.0f} s of the budget left"

    def begin(self, cell: CellSpec, needs_start: bool) -> None:
        self._running[cell.key] = Commitment(cell.gpu, self.estimate_s(cell, needs_start), _gpus(cell))
        if needs_start:
            self.costs.mark_started(start_place(cell.engine.value, cell.gpu))

    def end(self, cell: CellSpec, elapsed_s: float, start_s: float | None) -> None:
        """An attempt of ``cell`` ended after ``elapsed_s``, its server started in ``start_s`` where it started one:
        charged, and what it measured taught to the cost model."""
        commitment = self._running.pop(cell.key, None)
        gpus = commitment.gpus if commitment else _gpus(cell)
        self.spent_s[cell.gpu] = self.spent_s.get(cell.gpu, 0.0) + elapsed_s * gpus
        self.measured[cell.gpu] = self.measured.get(cell.gpu, 0) + 1
        place = start_place(cell.engine.value, cell.gpu)
        tiered = get_policy(cell.policy).has_cpu_tier
        if start_s is not None:
            self.costs.record_start(place, tiered, start_s)
        span_s = self._predicted_span_s(cell)
        self.costs.record_load(place, max(0.0, elapsed_s - (start_s or 0.0) - self.costs.shipped(place).reset_s),
                               base_load_s(cell.workload, cell.device, span_s))  # fmt: skip

    def _predicted_span_s(self, cell: CellSpec) -> float | None:
        prediction = self.predictions.get(cell.key)
        return prediction.span_s if prediction is not None else None

    def _committed_s(self, gpu: str | None) -> float:
        spent = sum(s for g, s in self.spent_s.items() if gpu is None or g == gpu)
        running = sum(c.estimate_s * c.gpus for c in self._running.values() if gpu is None or c.gpu == gpu)
        return spent + running


def _gpus(cell: CellSpec) -> int:
    """The devices an attempt of ``cell`` holds: its gang on GPUs, else one slot."""
    return max(1, cell.gang_size)
