"""The crossover search's bisection (pure): it brackets every change of verdict to the resolution, asks for
each round's loads at once, and asks the same loads when run again (so a resumed search finds its cells)."""

from __future__ import annotations

import pytest

from sweeps.crossover import bisect_flips


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
