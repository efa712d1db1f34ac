"""What a budgeted run has spent and committed, and whether the next cell fits (pure; the driver and the plan
feed it).

Device time is counted per GPU type and in all: each attempt's wall time (its server's start included) times the
GPUs it holds. A cell starts only when its estimate fits what is left after what was spent and what the cells still
running will take (their estimates, or the time they have run where that is longer). Where it does not fit while
cells that count against the same budget still run, the next one waits for them (they may end under their estimates);
where it does not fit and none runs, its type stops there, and its cells are left for a later run, in the same order.

A running cell may take longer than its estimate; none takes more than ``OVERRUN_LIMIT`` times it: past that
(``overrun``), the driver stops it, charges what it ran, and leaves it for a later run. The bound this gives, for
each limit of the budget (a type's, or the one for all), in device seconds:

    spent <= budget + (OVERRUN_LIMIT - 1) x (estimates of the cells running at the last start) <= OVERRUN_LIMIT x budget

At the last start, at t, what had ended by then (E, charged at what it ran) and the estimates of the cells running
then, the new one included (R), fit the budget: sum_E ran + sum_R estimate <= budget (a running cell counts at least
its estimate). No cell starts after t, and each of R ends within ``OVERRUN_LIMIT`` x its estimate, so the run spends
sum_E ran + sum_R ran <= budget + (OVERRUN_LIMIT - 1) x sum_R estimate, and sum_R estimate <= budget. It holds to
within the driver's look at the running cells (every half second) and the time to stop one, and assumes the budget
is the run's only spender of its devices.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from orchestrator.budget.cost import CostModel, base_load_s, start_place
from orchestrator.budget.gpu_budget import GpuBudget
from orchestrator.cell.spec import CellSpec
from orchestrator.records.prediction import Prediction

OVERRUN_LIMIT = 2.0  # a running cell is stopped once it has run this many times its estimate


@dataclass(frozen=True)
class Commitment:
    gpu: str
    estimate_s: float  # of the whole attempt, per GPU it holds
    gpus: int
    began: float  # on the spending's clock
    start_estimate_s: float = 0.0  # the part of the estimate that is its server's start (0: it reuses one)
    cold: bool | None = None  # its start on a node where no server had started yet (None: not known)

    @property
    def allowance_s(self) -> float:
        """How long it may run before it is stopped."""
        return OVERRUN_LIMIT * self.estimate_s


class Spending:
    """``clock`` is ``time.monotonic`` but in tests, and in a plan, which runs nothing (a clock that stands still).
    ``cold``, where a caller passes it: whether a cell's start is on a node where no server has started yet in the
    run (None: not known, as ``CostModel.start_s``)."""

    def __init__(self, budget: GpuBudget, costs: CostModel, predictions: Mapping[str, Prediction],
                 clock: Callable[[], float] = time.monotonic):  # fmt: skip
        self.budget = budget
        self.costs = costs
        self.predictions = predictions
        self.clock = clock
        self.spent_s: dict[str, float] = {}  # per GPU type
        self.measured: dict[str, int] = {}  # attempts charged, per GPU type
        self.running: dict[str, Commitment] = {}  # by cell key: the cells begun and not ended

    def estimate_s(self, cell: CellSpec, needs_start: bool, cold: bool | None = None) -> float:
        """``cell``'s attempt, per GPU it holds: a start where it needs one, its load and the reset after it."""
        place = start_place(cell.engine.value, cell.gpu)
        return self.costs.cell_s(place, cell.workload, cell.device, self._predicted_span_s(cell),
                                 tiered=cell.engine_setup.tier_gib > 0, needs_start=needs_start, cold=cold)  # fmt: skip

    def left_s(self, gpu: str) -> float:
        """What is left for ``gpu``: of its own budget and of the budget for all, the less."""
        lefts = []
        if gpu in self.budget.by_type:
            lefts.append(self.budget.by_type[gpu] - self._committed_s(gpu))
        if self.budget.total_s is not None:
            lefts.append(self.budget.total_s - self._committed_s(None))
        return min(lefts) if lefts else 0.0

    def refusal(self, cell: CellSpec, needs_start: bool, cold: bool | None = None) -> str | None:
        """Why ``cell`` must not start now (the budget does not cover its type, or its estimate does not fit what
        is left), or None."""
        if not self.budget.measures(cell.gpu):
            return f"--gpu-budget {self.budget} gives {cell.gpu} no time"
        cost = self.estimate_s(cell, needs_start, cold) * gpus_held(cell)
        left = self.left_s(cell.gpu)
        if cost <= left:
            return None
        return f"the next {cell.gpu} cell needs about {cost:.0f} s, {max(0.0, left):.0f} s of the budget left"

    def begin(self, cell: CellSpec, needs_start: bool, cold: bool | None = None) -> None:
        place = start_place(cell.engine.value, cell.gpu)
        tiered = cell.engine_setup.tier_gib > 0
        start_s = self.costs.start_s(place, tiered, cold) if needs_start else 0.0
        cold = self.costs.counts_cold(place, cold) if needs_start else None
        self.running[cell.key] = Commitment(cell.gpu, self.estimate_s(cell, needs_start, cold), gpus_held(cell),
                                            self.clock(), start_s, cold)  # fmt: skip
        if needs_start:
            self.costs.mark_started(place)

    def overrun(self, now: float) -> list[str]:
        """The running cells (by key) that have run past their allowance at ``now`` (on the spending's clock)."""
        return [key for key, commitment in self.running.items() if now - commitment.began > commitment.allowance_s]

    def end(self, cell: CellSpec, elapsed_s: float, start_s: float | None, done: bool, cut_short: bool = False) -> None:
        """An attempt of ``cell`` ended after ``elapsed_s``, having spent ``start_s`` before its load where it
        started a server (``cost.start_spent_s``; None where the worker did not say): charged whatever its end; the
        start taught to the cost model as cold or warm as it began. A done cell's load is taught too, and one ``cut_short`` by a time limit (its own, or the budget's
        overrun stop) teaches that its load is at least what it ran; a crash or a hang says nothing of it."""
        commitment = self.running.pop(cell.key, None)
        self.spent_s[cell.gpu] = self.spent_s.get(cell.gpu, 0.0) + elapsed_s * gpus_held(cell)
        self.measured[cell.gpu] = self.measured.get(cell.gpu, 0) + 1
        place = start_place(cell.engine.value, cell.gpu)
        if start_s is not None:
            self.costs.record_start(place, cell.engine_setup.tier_gib > 0, start_s, commitment and commitment.cold)
        base_s = base_load_s(cell.workload, cell.device, self._predicted_span_s(cell))
        if done:
            reset_s = self.costs.shipped(place).reset_s
            self.costs.record_load(place, max(0.0, elapsed_s - (start_s or 0.0) - reset_s), base_s)
        elif cut_short:  # it never reached its reset; its start, where the worker did not say, as estimated
            started_in = start_s if start_s is not None else commitment.start_estimate_s if commitment else 0.0
            self.costs.record_load(place, max(0.0, elapsed_s - started_in), base_s)

    def waiting_may_help(self, gpu: str) -> bool:
        """Whether a cell still running counts against one of ``gpu``'s limits: it may end under its estimate."""
        counted = [None] if self.budget.total_s is not None else []
        counted += [gpu] if gpu in self.budget.by_type else []
        return any(limit is None or c.gpu == limit for c in self.running.values() for limit in counted)

    def _predicted_span_s(self, cell: CellSpec) -> float | None:
        prediction = self.predictions.get(cell.key)
        return prediction.span_s if prediction is not None else None

    def _committed_s(self, gpu: str | None) -> float:
        spent = sum(s for g, s in self.spent_s.items() if gpu is None or g == gpu)
        now = self.clock()
        running = sum(max(c.estimate_s, now - c.began) * c.gpus for c in self.running.values()
                      if gpu is None or c.gpu == gpu)  # fmt: skip
        return spent + running


def gpus_held(cell: CellSpec) -> int:
    """The devices an attempt of ``cell`` holds: its gang on GPUs, else one slot."""
    return max(1, cell.gang_size)
