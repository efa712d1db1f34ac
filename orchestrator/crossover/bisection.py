"""Bisection over load (pure): brackets every change of verdict to a resolution, asking a judge for each
round's loads at once, and the same loads when run again (so a resumed search finds its cells done)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

START_LOADS = 5
NOT_MEASURED = "not measured"  # a load whose cells could not run (their GPU type is absent): no verdict

Judge = Callable[[list[float]], dict[float, str]]  # per load, its verdict's label (``Verdict.label``) or NOT_MEASURED


class Flip(NamedTuple):
    """A change of verdict between two loads (jobs per second)."""

    jps_below: float
    jps_above: float
    below: str
    above: str


def start_loads(jps_min: float, jps_max: float, num_start: int = START_LOADS) -> list[float]:
    """The search's first loads: ``num_start`` spread geometrically over the range, both ends included."""
    ratio = (jps_max / jps_min) ** (1 / (num_start - 1))
    return [round(jps_min * ratio**i, 3) for i in range(num_start - 1)] + [jps_max]


def bisect_flips(judge: Judge, jps_min: float, jps_max: float, resolution: float,
                 num_start: int = START_LOADS) -> list[Flip]:  # fmt: skip
    """Every change of verdict, bracketed no wider than ``resolution``. Each round asks ``judge`` for all the
    loads it needs at once, and the loads depend only on the verdicts, so a repeated search asks the same."""
    return narrow_flips(judge, judge(start_loads(jps_min, jps_max, num_start)), resolution)


def narrow_flips(judge: Judge, verdicts: dict[float, str], resolution: float) -> list[Flip]:
    """Halve (geometrically) every interval between adjacent loads of ``verdicts`` whose ends differ until it
    is no wider than ``resolution``; the flips found, each round's loads asked of ``judge`` at once."""
    verdicts = dict(verdicts)
    loads = sorted(verdicts)
    brackets = [(a, b) for a, b in zip(loads, loads[1:]) if verdicts[a] != verdicts[b]]
    flips = []
    while brackets:
        narrow = [(a, b) for a, b in brackets if b - a <= resolution or round(math.sqrt(a * b), 3) in (a, b)]
        flips += [Flip(a, b, verdicts[a], verdicts[b]) for a, b in narrow]
        wide = [(a, b) for a, b in brackets if (a, b) not in narrow]
        middles = {(a, b): round(math.sqrt(a * b), 3) for a, b in wide}
        verdicts |= judge(sorted(set(middles.values()))) if middles else {}
        halves = [pair for (a, b), mid in middles.items() for pair in ((a, mid), (mid, b))]
        brackets = [(x, y) for x, y in halves if verdicts[x] != verdicts[y]]
    return sorted(flips)


def locate_flip(judge: Judge, flip: Flip, jps_min: float, jps_max: float,
                resolution: float) -> tuple[dict[float, str], list[Flip]]:  # fmt: skip
    """Where the measured engine changes verdict near a simulated ``flip``: its two loads are measured; on a
    side where the measurement does not read the simulated verdict, the search walks away from the flip
    (each step geometrically twice the last, within the range) until it does, the range ends or a load
    cannot be measured (its GPU type is absent), then narrows every change between the loads measured.
    Measures nothing more when the two loads agree with the simulation; a simulator that puts a flip at the
    wrong load costs a few loads, not a new search. Returns the verdicts of the two loads and of the walk,
    and every change found."""
    verdicts = judge([flip.jps_below, flip.jps_above])
    ratio = flip.jps_above / flip.jps_below
    for side, wanted, limit in ((-1, flip.below, jps_min), (1, flip.above, jps_max)):
        load, step = (flip.jps_below, flip.jps_above)[side > 0], ratio
        while verdicts[load] not in (wanted, NOT_MEASURED) and load != limit:
            load = max(limit, round(load / step, 3)) if side < 0 else min(limit, round(load * step, 3))
            verdicts |= judge([load])
            step *= step
    measured = {load: verdict for load, verdict in verdicts.items() if verdict != NOT_MEASURED}
    return verdicts, narrow_flips(judge, measured, resolution)


def confirmation(measured: dict[float, str], measured_flips: list[Flip], simulated: Flip) -> dict:
    """The crossover.csv columns of one simulated flip's measurement: the verdicts at its two loads, whether the
    measured engine changes between the same two verdicts (there or nearby: ``confirmed``), the bracket of the
    nearest such change, and every change the measurement found."""
    middle = math.sqrt(simulated.jps_below * simulated.jps_above)
    same = sorted((flip for flip in measured_flips if (flip.below, flip.above) == (simulated.below, simulated.above)),
                  key=lambda flip: abs(math.log(math.sqrt(flip.jps_below * flip.jps_above) / middle)))  # fmt: skip
    at_loads = (measured[simulated.jps_below], measured[simulated.jps_above])
    return {"vllm_below": at_loads[0], "vllm_above": at_loads[1],
            "at_simulated_loads": at_loads == (simulated.below, simulated.above), "confirmed": bool(same),
            "vllm_jps_below": same[0].jps_below if same else math.nan,
            "vllm_jps_above": same[0].jps_above if same else math.nan,
            "vllm_changes": "; ".join(f"{f.jps_below:g}-{f.jps_above:g}: {f.below} to {f.above}"
                                      for f in measured_flips)}  # fmt: skip
