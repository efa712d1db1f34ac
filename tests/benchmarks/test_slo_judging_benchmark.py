"""The SLO-judging benchmark's machinery: its distributions' quantiles are their true ones, and a small grid prints its
table and the JSON line (docs/capacity.md has the full grid's figures)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.slo_judging import DISTRIBUTIONS, main


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_each_distributions_quantile_is_the_share_of_its_draws_below_it(name):
    distribution = DISTRIBUTIONS[name]
    draws = distribution.sample(np.random.default_rng(0), 200_000)
    for q in (0.5, 0.9, 0.99):
        assert (draws <= distribution.quantile(q)).mean() == pytest.approx(q, abs=0.005)


def test_a_small_grid_prints_a_row_each_and_never_calls_a_target_3pct_over_its_limit_met_beyond_its_error(capsys):
    assert main(["--draws", "200", "--jobs", "40", "--percentiles", "50", "90", "--trials", "1", "3"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(figures["rows"]) == 3 * 2 * 2 and figures["flagged"] == 0
    for row in figures["rows"]:
        assert 0 <= row["met_over"] <= row["met_under"] and row["too_few"] == 0  # 40 jobs bound a p90
