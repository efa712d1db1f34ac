"""The crossover search's bisection (``orchestrator/crossover/bisection.py``, pure): it brackets every change of
verdict to the resolution, asks for each round's loads at once, and asks the same loads when run again (so a
resumed search finds its cells)."""

from __future__ import annotations

import pandas as pd
import pytest

from orchestrator.crossover.bisection import NOT_MEASURED, Flip, bisect_flips, confirmation, locate_flip


class Recorded:
    """A judge with a known answer: a tie up to ``flip_at``, continuum above it, lmcache above
    ``second_flip_at`` (if given); every call recorded."""

    def __init__(self, flip_at: float, second_flip_at: float = float("inf")):
        self.flip_at, self.second_flip_at, self.calls = flip_at, second_flip_at, []

    def __call__(self, loads: list[float]) -> dict[float, str]:
        self.calls.append(list(loads))
        return {jps: self._verdict(jps) for jps in loads}

    def _verdict(self, jps: float) -> str:
        if jps > self.second_flip_at:
            return "lmcache"
        return "continuum" if jps > self.flip_at else "tie"


def test_the_flip_is_bracketed_to_the_resolution_and_a_repeated_search_asks_the_same_loads():
    judge = Recorded(flip_at=3.3)
    (flip,) = bisect_flips(judge, 1.0, 15.0, resolution=0.25)
    below, above, verdict_below, verdict_above = flip
    assert below <= 3.3 < above and above - below <= 0.25 and (verdict_below, verdict_above) == ("tie", "continuum")
    again = Recorded(flip_at=3.3)
    assert bisect_flips(again, 1.0, 15.0, resolution=0.25) == [flip] and again.calls == judge.calls
    assert len(judge.calls[0]) == 5 and all(len(call) == 1 for call in judge.calls[1:])  # one bracket, one load a round


def test_two_changes_are_both_found_and_no_change_gives_none():
    flips = bisect_flips(Recorded(flip_at=2.0, second_flip_at=9.0), 1.0, 15.0, resolution=0.5)
    assert len(flips) == 2 and flips[0][0] <= 2.0 < flips[0][1] and flips[1][0] <= 9.0 < flips[1][1]
    assert [(below, above) for *_, below, above in flips] == [("tie", "continuum"), ("continuum", "lmcache")]
    assert bisect_flips(Recorded(flip_at=100.0), 1.0, 15.0, resolution=0.5) == []


@pytest.mark.parametrize("resolution", [2.0, 0.1])
def test_every_bracket_is_no_wider_than_the_resolution(resolution):
    for below, above, *_ in bisect_flips(Recorded(flip_at=7.77), 1.0, 15.0, resolution):
        assert above - below <= resolution and below <= 7.77 < above


def test_a_measured_flip_where_the_simulator_put_it_is_confirmed_with_its_two_loads_alone():
    measured = Recorded(flip_at=4.0)
    verdicts, flips = locate_flip(measured, Flip(3.83, 4.8, "tie", "continuum"), 1.0, 6.0, resolution=1.0)
    assert measured.calls == [[3.83, 4.8]] and flips == [Flip(3.83, 4.8, "tie", "continuum")]
    row = confirmation(verdicts, flips, Flip(3.83, 4.8, "tie", "continuum"))
    assert row["confirmed"] and row["at_simulated_loads"]
    assert (row["vllm_jps_below"], row["vllm_jps_above"]) == (3.83, 4.8)


@pytest.mark.parametrize("true_flip", [1.7, 2.6, 5.5])
def test_a_measured_flip_away_from_the_simulated_one_is_walked_to_and_bracketed(true_flip):
    simulated = Flip(3.83, 4.8, "tie", "continuum")
    measured = Recorded(flip_at=true_flip)
    verdicts, flips = locate_flip(measured, simulated, 1.0, 6.0, resolution=0.5)
    row = confirmation(verdicts, flips, simulated)
    assert row["confirmed"] and not row["at_simulated_loads"]
    assert row["vllm_jps_below"] <= true_flip < row["vllm_jps_above"] <= row["vllm_jps_below"] + 0.5
    asked = [load for call in measured.calls for load in call]
    assert len(asked) == len(set(asked)) and all(1.0 <= load <= 6.0 for load in asked)


def test_a_measurement_with_no_such_change_in_range_is_not_confirmed_and_says_what_it_found():
    simulated = Flip(3.83, 4.8, "tie", "continuum")
    verdicts, flips = locate_flip(Recorded(flip_at=0.5, second_flip_at=3.0), simulated, 1.0, 6.0, resolution=0.5)
    row = confirmation(verdicts, flips, simulated)
    assert not row["confirmed"] and pd.isna(row["vllm_jps_below"])
    assert row["vllm_changes"].endswith(": continuum to lmcache") and len(flips) == 1


def test_loads_that_cannot_be_measured_stop_the_walk_and_are_not_bisected():
    def absent_gpu(loads: list[float]) -> dict[float, str]:
        asked.append(list(loads))
        return {jps: NOT_MEASURED for jps in loads}

    asked: list[list[float]] = []
    verdicts, flips = locate_flip(absent_gpu, Flip(3.83, 4.8, "tie", "continuum"), 1.0, 6.0, resolution=0.5)
    assert asked == [[3.83, 4.8]] and flips == []
    assert not confirmation(verdicts, flips, Flip(3.83, 4.8, "tie", "continuum"))["confirmed"]
