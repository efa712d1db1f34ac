"""The plan of a budgeted run: the cells in the order the rule gives (``priority``), each with its estimated cost,
and which of them the budget covers (pure).

The plan walks the order as a run would: each GPU type's cells go to its slots (a slot whose server holds the cell's
configuration takes it without a start, else the least busy slot starts one), and a type whose next cell does not fit
what is left stops there. Each slot's first start is cold (its node's compile cache and the model's inspection are
taken as cold, as on a fresh node: the slots of one node count one cold start each, an upper-leaning guess), its
later ones warm. ``budget_plan.csv`` is the plan's table; the dry run prints it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import pandas as pd

from orchestrator.budget.gpu_budget import GpuBudget, in_words
from orchestrator.budget.priority import RULE, Ranked
from orchestrator.budget.spend import Spending, gpus_held


@dataclass(frozen=True)
class PlannedCell:
    order: int  # 1 for the first cell measured
    cell_key: str
    label: str
    gpu: str
    reason: str  # the rule's reason, in words
    why: str
    needs_start: bool
    estimate_s: float  # device seconds: the attempt's estimate times the GPUs it holds
    fits: bool  # within the budget when every estimate before it holds
    left_after_s: float  # of the budget for its type, after it (where it fits)


def plan_cells(ranked: Sequence[Ranked], spending: Spending, slots: Mapping[str, int],
               done: frozenset[str] = frozenset()) -> list[PlannedCell]:  # fmt: skip
    """``ranked`` (less the ``done`` keys) as a run would take them, on ``slots`` per GPU type (one where the cluster
    has none yet), spending from ``spending`` as it goes (pass a fresh one with a clock that stands still: nothing
    runs, so every planned cell stays committed at its estimate)."""
    servers: dict[str, list[tuple]] = {}  # per GPU type, what each slot's server holds (None: nothing yet)
    busy: dict[str, list[float]] = {}
    stopped: set[str] = set()
    planned = []
    for ranked_cell in (r for r in ranked if r.cell.key not in done):
        cell = ranked_cell.cell
        held = servers.setdefault(cell.gpu, [None] * max(1, slots.get(cell.gpu, 1)))
        loads = busy.setdefault(cell.gpu, [0.0] * len(held))
        slot = held.index(cell.server_group) if cell.server_group in held else loads.index(min(loads))
        needs_start = held[slot] != cell.server_group or cell.gang_size > 0  # a gang starts its replicas anew
        cold = held[slot] is None  # the slot's first start: its node's caches taken as cold
        refusal = None if cell.gpu in stopped else spending.refusal(cell, needs_start, cold)
        fits = cell.gpu not in stopped and refusal is None
        estimate = spending.estimate_s(cell, needs_start, cold) * gpus_held(cell)
        if fits:
            spending.begin(cell, needs_start, cold)
        else:
            stopped.add(cell.gpu)
        # A cell past the budget still takes its slot: the plan's starts and costs are also the next run's, which
        # measures these cells in this order.
        held[slot], loads[slot] = cell.server_group, loads[slot] + estimate
        planned.append(PlannedCell(len(planned) + 1, cell.key, cell.label, cell.gpu, ranked_cell.reason.words,
                                   ranked_cell.why, needs_start, estimate, fits,
                                   spending.left_s(cell.gpu) if fits else 0.0))  # fmt: skip
    return planned


def plan_frame(planned: Sequence[PlannedCell]) -> pd.DataFrame:
    return pd.DataFrame([asdict(cell) for cell in planned], columns=list(PlannedCell.__dataclass_fields__))


def plan_lines(planned: Sequence[PlannedCell], budget: GpuBudget, num_done: int) -> list[str]:
    """The dry run's account of the plan: the rule, each cell in order with its cost, and what stays predicted."""
    covered = [cell for cell in planned if cell.fits]
    lines = ["The order (measured first: what a measurement can change):", *("  " + line for line in RULE.splitlines()),
             "", f"{'#':>4}  {'fits':<4}  {'cost':>8}  {'start':<5}  {'reason':<16}  cell / why"]  # fmt: skip
    for cell in planned:
        lines.append(f"{cell.order:>4}  {'yes' if cell.fits else 'no':<4}  {cell.estimate_s:>7.0f}s  "
                     f"{'yes' if cell.needs_start else '':<5}  {cell.reason:<16}  {cell.label}")  # fmt: skip
        lines.append(f"{'':>47}{cell.why}")
    by_gpu: dict[str, list[PlannedCell]] = {}
    for cell in planned:
        by_gpu.setdefault(cell.gpu, []).append(cell)
    lines.append("")
    for gpu, cells in by_gpu.items():
        fit = [cell for cell in cells if cell.fits]
        spent = sum(c.estimate_s for c in fit)
        lines.append(f"{gpu}: {len(fit)} of {len(cells)} cells to measure fit, about {spent:.0f} s ({in_words(spent)}); "
                     f"{len(cells) - len(fit)} stay predicted for a later run")  # fmt: skip
    total = sum(cell.estimate_s for cell in covered)
    lines.append(f"--gpu-budget {budget}: {len(covered)} of {len(planned)} cells measured, about {total:.0f} s of device "
                 f"time; {len(planned) - len(covered)} left predicted only" + (f"; {num_done} already measured" if num_done else ""))  # fmt: skip
    return lines
