"""Capacity from the loads judged (failures counted as not met, a non-monotone curve reported), the next fleet size
to check, and cost (pure)."""

from __future__ import annotations

import pytest

from orchestrator.capacity.plan import (
    Capacity,
    LoadState,
    capacity_of,
    cost_per_thousand_jobs,
    failure_of,
    first_fleet_guess,
    fleet_size,
    most_replicas,  # fmt: skip
    next_fleet_size,
    parse_prices,
)
from orchestrator.inputs.validation import InputError
from orchestrator.records.slo import Met

M, X, U, F, H = LoadState.MET, LoadState.MISSED, LoadState.UNSURE, LoadState.FAILED, LoadState.HUNG


def test_capacity_is_the_highest_load_met_before_the_first_not_met():
    assert capacity_of({1: M, 2: M, 3: U, 4: X}) == Capacity(2, 3, U, ())
    assert capacity_of({1: X, 2: X}) == Capacity(None, 1, X, ())
    assert capacity_of({1: M, 2: M}) == Capacity(2, None, None, ())
    assert capacity_of({1: M, 2: M}).in_words() == "at least 2 JPS (met at every load searched)"
    assert {state.value for state in Met} <= {state.value for state in LoadState}  # every SLO judgement is a state


def test_a_load_where_a_trial_failed_or_hung_is_not_met_and_says_which():
    assert capacity_of({1: M, 2: F, 4: M, 8: U}) == Capacity(1, 2, F, (4,))
    assert capacity_of({1.756: M, 1.8: H, 2.5: H}).in_words() == "1.756 JPS (hung at 1.8)"
    assert capacity_of({1: F, 2: M}).in_words() == ("below 1 JPS (failed at 1); not monotone in load: met again at 2 JPS, "
                                                   "above a load not met")  # fmt: skip
    # Any trial's failure decides, failed before hung; with none, the done trials are the SLO's to judge.
    assert failure_of(["done", "hung", "failed"]) is F and failure_of(["done", "hung"]) is H
    assert failure_of(["done", "interrupted", "not_run"]) is None and failure_of([]) is None


def test_a_load_met_above_one_not_met_is_reported_as_not_monotone_and_does_not_raise_the_capacity():
    capacity = capacity_of({1: M, 2: X, 3: M, 4: X, 5: M})
    assert capacity == Capacity(1, 2, X, (3, 5))
    assert capacity.in_words() == ("1 JPS (missed at 2); not monotone in load: met again at 3, 5 JPS, above a load "
                                   "not met")  # fmt: skip


def _fleet_search(meets_from: int, guess: int) -> tuple[int | None, list[int]]:
    checked: dict[int, bool] = {}
    while (size := next_fleet_size(checked, guess)) is not None:
        checked[size] = size >= meets_from
    return fleet_size(checked), list(checked)


@pytest.mark.parametrize("meets_from, guess, order", [(3, 3, [3, 2]), (3, 5, [5, 4, 3, 2]), (5, 3, [3, 4, 5]),
                                                      (1, 2, [2, 1])])  # fmt: skip
def test_the_fleet_search_finds_the_fewest_replicas_that_meet_it_from_the_guess(meets_from, guess, order):
    assert _fleet_search(meets_from, guess) == (meets_from, order)


def test_a_fleet_search_gives_up_past_its_bound():
    size, checked = _fleet_search(10**6, 2)
    assert size is None and max(checked) == most_replicas(2)


def test_the_guess_and_the_cost():
    assert first_fleet_guess(12, 4.655) == 3 and first_fleet_guess(12, 4) == 3 and first_fleet_guess(0.1, 4) == 1
    assert cost_per_thousand_jobs(3.6, 2, 1.0) == pytest.approx(2.0)  # 7.2 per hour for 3,600 jobs


def test_prices_are_read_per_gpu_type_with_one_line_for_bad_input():
    assert parse_prices("H100=2.49, H200=3.8", ("H100", "H200")) == {"H100": 2.49, "H200": 3.8}
    for text in ("H100=cheap", "B200=5", "H100=0"):
        with pytest.raises(InputError, match="valid: comma-separated TYPE=PRICE"):
            parse_prices(text, ("H100", "H200"))


def test_below_some_load_a_cell_has_too_few_jobs_to_bound_the_slos_percentile():
    """A p90 needs 36 jobs, a p99 368; the search asks for half as many again, so that a Poisson draw rarely falls
    short: over a 45 s window that is 1.2 and about 12.3 JPS for one trial."""
    from orchestrator.capacity.plan import lowest_judgeable_jps
    from orchestrator.records.slo import Slo

    assert lowest_judgeable_jps(Slo.parse("jct_p90=60s"), 45, 1) == pytest.approx(1.2)
    assert lowest_judgeable_jps(Slo.parse("jct_p90=60s,ttft_p99=2s"), 45, 3) == pytest.approx(1.5 * 368 / 135)
    assert lowest_judgeable_jps(Slo.parse("jct_mean=60s"), 45, 1) is None


def test_a_load_with_too_few_jobs_is_left_out_of_the_capacity_and_listed():
    capacity = capacity_of({0.5: LoadState.TOO_FEW_JOBS, 1: LoadState.MET, 2: LoadState.MISSED})
    assert (capacity.jps, capacity.first_unmet_jps, capacity.too_few_jobs_jps) == (1, 2, (0.5,))
    assert "too few jobs to judge at 0.5 JPS" in capacity.in_words()
    assert capacity_of({0.5: LoadState.TOO_FEW_JOBS}).in_words().startswith("not judged")
