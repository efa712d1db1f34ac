"""Which cells to measure first: those whose measurement can change the answer (pure).

Every cell is predicted before any is measured, and every comparison (a GPU type with its TP, DRAM budget, load and
replica count, all its policies) has a predicted verdict (``analysis/verdicts.py`` on the simulated twins, bands
included). The cells of a comparison share its reason, first that applies:

1. not called: the simulator cannot call the comparison within its error (a margin whose lower end is inside the
   band: "too close to call in simulation"; a tie whose interval reaches past the band), it predicts a trade-off
   (jobs lost, where it is least sure), or it has no verdict;
2. next to a flip: the predicted verdict changes between this load and the next one on the same line (GPU type,
   budget, replicas): where a winner flips, the measured flip may sit elsewhere;
3. the tier serves: the preflight puts a policy with a CPU tier in the regime where its tier must serve (the live
   set fits on the GPU, the corpus spills), which the simulator models least directly;
4. clear: the simulator calls it: a win whose lower margin end lies beyond the band, or a tie whose whole interval
   lies inside it.

Comparisons are measured whole: all the cells of one run before the next comparison's, so that a budget completes
comparisons one after another (only the last it reaches may stay partial). They go by reason, then nearest their
band first (a win's lower margin end, in bands beyond the band; a tie's interval end farthest from zero, in bands
inside it), then in grid order. Inside a comparison, the cells that share a server configuration (GPU type, policy,
budget, replicas, TP) run back to back, and it begins with the configuration the previous comparison ended on
(fcfs, continuum | continuum, fcfs | fcfs, continuum), so that one replica serves on, reset between cells: on one
slot, each comparison after the first needs one start fewer (of two policies, one start instead of two).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.cell.spec import CellSpec
from orchestrator.records.arm import arm_name, shape_name
from orchestrator.records.verdict import MIN_EFFECT_PCT, Verdict, VerdictKind, changes
from orchestrator.sim.error_bands import SimErrors
from orchestrator.sizing.kv import Regime

# The rule is written once, here, and the dry run prints it as written.
RULE = __doc__.split("\n\n", 1)[1].strip().replace("``", "")


class Reason(enum.IntEnum):
    NOT_CALLED = 1
    NEXT_TO_FLIP = 2
    TIER_SERVES = 3
    CLEAR = 4

    @property
    def words(self) -> str:
        return {Reason.NOT_CALLED: "not called", Reason.NEXT_TO_FLIP: "next to a flip",
                Reason.TIER_SERVES: "the tier serves", Reason.CLEAR: "clear"}[self]  # fmt: skip


Point = tuple[str, float, float, int]  # a comparison: GPU (with its TP), DRAM budget, load, replicas


def point(gpu: str, tp: int, dram_gb: float, jps: float, replicas: int) -> Point:
    """A comparison as its verdict names it: a tensor-parallel GPU reads "H100 TP4" (``analysis.verdicts``)."""
    return shape_name(gpu, tp), float(dram_gb), float(jps), int(replicas)


def point_of(cell: CellSpec) -> Point:
    """The comparison ``cell`` belongs to."""
    return point(cell.gpu, cell.tp, cell.dram_gb, cell.jps, cell.replicas)


def verdict_point(verdict: Verdict) -> Point:
    return verdict.gpu, verdict.dram_gb, verdict.jps, verdict.replicas


@dataclass(frozen=True)
class Ranked:
    cell: CellSpec
    reason: Reason
    why: str
    distance: float  # in bands: how far the predicted verdict is from being uncertain (0: not at all)


def rank_cells(cells: Sequence[CellSpec], predicted: Sequence[Verdict], errors: SimErrors,
               regimes: Mapping[str, Regime | None]) -> list[Ranked]:  # fmt: skip
    """``cells`` in the order to measure them, each with its reason and why in words: comparisons whole, by reason,
    distance and grid order, each beginning with the server configuration the one before it ended on."""
    by_point = {verdict_point(verdict): verdict for verdict in predicted}
    flips = _flips(predicted)
    of_point: dict[Point, list[CellSpec]] = {}  # in grid order
    for cell in cells:
        of_point.setdefault(point_of(cell), []).append(cell)
    kv_policy_of = {arm_name(cell.policy, cell.router.value if cell.router else None): cell.policy for cell in cells}
    reasons = {}
    for point, members in of_point.items():
        # A routed arm's band is its KV policy's; a comparison's tier serves where any of its tiered cells must.
        tier_serves = any(cell.engine_setup.tier_gib > 0 and regimes.get(cell.key) is Regime.OFFLOAD_WINDOW
                          for cell in members)  # fmt: skip
        reasons[point] = _reason(by_point.get(point), flips.get(point), tier_serves, errors,
                                 {cell.policy for cell in members}, kv_policy_of)  # fmt: skip
    grid = {point: index for index, point in enumerate(of_point)}
    ordered: list[Ranked] = []
    for point in sorted(of_point, key=lambda p: (reasons[p][0], reasons[p][2], grid[p])):
        ended_on = ordered[-1].cell.server_group if ordered else None
        ordered += [Ranked(cell, *reasons[point]) for cell in _beginning_with(of_point[point], ended_on)]
    return ordered


def _beginning_with(cells: Sequence[CellSpec], group: tuple | None) -> list[CellSpec]:
    """One comparison's ``cells`` (in grid order), those of one server configuration back to back, ``group``'s
    first where the comparison has it (its replica serves on), the others in grid order."""
    groups = list(dict.fromkeys(cell.server_group for cell in cells))
    if group in groups:
        groups.remove(group)
        groups.insert(0, group)
    return [cell for each in groups for cell in cells if cell.server_group == each]


def _reason(verdict: Verdict | None, flip: str | None, tier_serves: bool, errors: SimErrors,
            policies: set[str], kv_policy_of: Mapping[str, str]) -> tuple[Reason, str, float]:  # fmt: skip
    if verdict is None or verdict.kind is VerdictKind.UNDECIDED:
        return Reason.NOT_CALLED, "no predicted verdict", 0.0
    leader = kv_policy_of.get(verdict.leader or "", verdict.leader or "")  # a routed arm's band is its KV policy's
    # The band the verdict itself cleared or not: its GPU's as the verdict names it ("H100 TP4" takes the largest).
    band = max([errors.band_pct(verdict.gpu, leader, other) for other in policies if other != leader] or [0.0])
    threshold = max(band, MIN_EFFECT_PCT)
    predicted = f"predicted {verdict.in_words()}"
    lo, hi = verdict.margin_lo_pct, verdict.margin_hi_pct
    margin = f"a margin of {verdict.margin_pct:.1f}% [{lo:.1f}, {hi:.1f}]"
    if verdict.kind is VerdictKind.TRADE_OFF:
        return Reason.NOT_CALLED, f"{predicted}: job losses are where the simulator is least sure", 0.0
    if verdict.within_sim_error:
        return Reason.NOT_CALLED, f"{predicted}: {margin}, its lower end within the {band:.1f}% band", 0.0
    if verdict.kind is VerdictKind.WIN:
        distance = max(0.0, (lo - threshold) / threshold)
        called = f"its lower end {distance:.1f} bands beyond the {threshold:.1f}% band"
    else:  # a tie is called only where its whole interval lies inside the band: either end past it may be a win
        reach = max(abs(lo), abs(hi))
        if reach >= threshold:
            return Reason.NOT_CALLED, (f"{predicted}: a tie whose interval [{lo:.1f}, {hi:.1f}] reaches past the "
                                       f"{threshold:.1f}% band"), 0.0  # fmt: skip
        distance = (threshold - reach) / threshold
        called = f"{margin}, inside the {threshold:.1f}% band"
    if flip is not None:
        return Reason.NEXT_TO_FLIP, f"{predicted}; {flip}", distance
    if tier_serves:
        return Reason.TIER_SERVES, f"{predicted}; the CPU tier must serve here (the corpus spills)", distance
    return Reason.CLEAR, f"{predicted}: {called}", distance


def _flips(predicted: Sequence[Verdict]) -> dict[Point, str]:
    """The points either side of each change of predicted verdict along a line, with the change in words."""
    near: dict[Point, str] = {}
    for below, above in changes(list(predicted)):
        words = f"the predicted verdict changes from {below.label} at {below.jps:g} to {above.label} at {above.jps:g} JPS"
        near.setdefault(verdict_point(below), words)
        near.setdefault(verdict_point(above), words)
    return near
