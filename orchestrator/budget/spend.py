"""What a budgeted run has spent and committed, and whether the next cell fits (pure; the driver and the plan
feed it).

Device time is counted per GPU type and in all: each attempt's wall time (its server's start included) times the
GPUs it holds. A cell starts only when its estimate fits what is left after what was spent and what the cells still
running will take (their estimates, or the time they have run where that is longer). Where it does not fit while
cells that count against the same budget still run, the next one waits for them (they may end under their estimates);
where it does not fit and none runs, its type stops there, and its cells are left for a later run, in the same order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from orchestrator.budget.cost import CostModel, base_load_s, start_place
from orchestrator.records.prediction import Prediction
from orchestrator.sweep.planning.cells import CellSpec
from orchestrator.sweep.planning.gpu_budget import GpuBudget


@dataclass(frozen=True)
class Commitment:
    gpu: str
    estimate_s: float  # of the whole attempt, per GPU it holds
    gpus: int
    began: float  # on the spending's clock


class Spending:
    """``clock`` is ``time.monotonic`` but in tests, and in a plan, which runs nothing (a clock that stands still)."""

    def __init__(self, budget: GpuBudget, costs: CostModel, predictions: Mapping[str, Prediction],
                 clock: Callable[[], float] = time.monotonic):  # fmt: skip
        self.budget = budget
        self.costs = costs
        self.predictions = predictions
        self.clock = clock
        self.spent_s: dict[str, float] = {}  # per GPU type
        self.measured: dict[str, int] = {}  # attempts charged, per GPU type
        self._running: dict[str, Commitment] = {}

    def estimate_s(self, cell: CellSpec, needs_start: bool) -> float:
        """``cell``'s attempt, per GPU it holds: a start where it needs one, its load and the reset after it."""
        place = start_place(cell.engine.value, cell.gpu)
        return self.costs.cell_s(place, cell.workload, cell.device, self._predicted_span_s(cell),
                                 tiered=cell.engine_setup.tier_gib > 0, needs_start=needs_start)  # fmt: skip

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
        cost = self.estimate_s(cell, needs_start) * gpus_held(cell)
        left = self.left_s(cell.gpu)
        if cost <= left:
            return None
        return f"the next {cell.gpu} cell needs about {cost:.0f} s, {max(0.0, left):.0f} s of the budget left"

    def begin(self, cell: CellSpec, needs_start: bool) -> None:
        self._running[cell.key] = Commitment(cell.gpu, self.estimate_s(cell, needs_start), gpus_held(cell), self.clock())
        if needs_start:
            self.costs.mark_started(start_place(cell.engine.value, cell.gpu))

    def end(self, cell: CellSpec, elapsed_s: float, start_s: float | None, done: bool) -> None:
        """An attempt of ``cell`` ended after ``elapsed_s``, its server started in ``start_s`` where it started one:
        charged whatever its end; a done cell's load taught to the cost model (a crash or a hang says nothing of how
        long a cell takes)."""
        self._running.pop(cell.key, None)
        self.spent_s[cell.gpu] = self.spent_s.get(cell.gpu, 0.0) + elapsed_s * gpus_held(cell)
        self.measured[cell.gpu] = self.measured.get(cell.gpu, 0) + 1
        place = start_place(cell.engine.value, cell.gpu)
        if start_s is not None:
            self.costs.record_start(place, cell.engine_setup.tier_gib > 0, start_s)
        if done:
            reset_s = self.costs.shipped(place).reset_s
            self.costs.record_load(place, max(0.0, elapsed_s - (start_s or 0.0) - reset_s),
                                   base_load_s(cell.workload, cell.device, self._predicted_span_s(cell)))  # fmt: skip

    def waiting_may_help(self, gpu: str) -> bool:
        """Whether a cell still running counts against one of ``gpu``'s limits: it may end under its estimate."""
        counted = [None] if self.budget.total_s is not None else []
        counted += [gpu] if gpu in self.budget.by_type else []
        return any(limit is None or c.gpu == limit for c in self._running.values() for limit in counted)

    def _predicted_span_s(self, cell: CellSpec) -> float | None:
        prediction = self.predictions.get(cell.key)
        return prediction.span_s if prediction is not None else None

    def _committed_s(self, gpu: str | None) -> float:
        spent = sum(s for g, s in self.spent_s.items() if gpu is None or g == gpu)
        now = self.clock()
        running = sum(max(c.estimate_s, now - c.began) * c.gpus for c in self._running.values()
                      if gpu is None or c.gpu == gpu)  # fmt: skip
        return spent + running


def gpus_held(cell: CellSpec) -> int:
    """The devices an attempt of ``cell`` holds: its gang on GPUs, else one slot."""
    return max(1, cell.gang_size)
