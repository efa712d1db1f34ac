"""The workload's distributions: exact CDFs and means against scipy, and draws that follow them."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import integrate, stats

from orchestrator.workload.distributions import (
    PRESETS,
    Capped,
    Fixed,
    IntUniform,
    LogNormal,
    Mixture,
    Uniform,
    parse_distribution,
)

TOOL_TIME = PRESETS["swe-agent-tool-time"]


def draws(dist, n: int, seed: int = 7) -> list[float]:
    rng = random.Random(seed)
    return [dist.sample(rng) for _ in range(n)]


def conditional_cdf(dist, below: float):
    """``dist``'s CDF given ``0 < x < below``: its continuous part, between the point masses at 0 and the cap."""
    low, high = dist.cdf(0.0), dist.cdf(math.nextafter(below, 0))
    return np.vectorize(lambda x: (dist.cdf(x) - low) / (high - low))


def test_lognormal_cdf_and_mean_match_scipy_and_a_mean_gives_the_spread():
    dist = LogNormal(median=0.49, mean=4.9)
    assert dist.sigma == pytest.approx(math.sqrt(2 * math.log(10)))
    reference = stats.lognorm(s=dist.sigma, scale=dist.median)
    for x in (0.01, 0.49, 3.0, 40.0):
        assert dist.cdf(x) == pytest.approx(reference.cdf(x), abs=1e-12)
    assert dist.mean == pytest.approx(reference.mean()) == pytest.approx(4.9)


def test_a_capped_mean_is_the_integral_of_the_survival_function():
    capped = Capped(dist=LogNormal(median=0.49, mean=4.9), max=300)
    expected, _ = integrate.quad(lambda x: 1 - capped.dist.cdf(x), 0, 300, limit=200)
    assert capped.mean == pytest.approx(expected, rel=1e-6)
    assert Capped(dist=Uniform(low=0, high=10), max=4).mean == pytest.approx(4 - 0.8, rel=1e-3)


def test_the_heavy_tailed_tool_time_mixture_follows_its_distribution():
    values = draws(TOOL_TIME, 20_000)
    zero_mass = TOOL_TIME.cdf(0.0)
    assert zero_mass == pytest.approx(0.61)
    # The point mass at 0 s (editor and submit calls) by a binomial test ...
    zeros = sum(value == 0.0 for value in values)
    assert stats.binomtest(zeros, len(values), zero_mass).pvalue > 0.001
    # ... and the continuous part (the shell commands and installs, below the cap) by Kolmogorov-Smirnov
    # against the mixture's own CDF conditioned on that range.
    inside = [value for value in values if 0.0 < value < 300.0]
    result = stats.kstest(inside, conditional_cdf(TOOL_TIME, below=300.0))
    assert result.pvalue > 0.001, result
    assert sum(values) / len(values) == pytest.approx(TOOL_TIME.mean, rel=0.1)


def test_a_wrong_sampler_fails_the_same_test():
    # The check above can fail: draws from a lognormal with the heavy shell's median but a third of its
    # spread are rejected against the preset's CDF.
    wrong = Mixture(components=TOOL_TIME.components[:2] + (
        TOOL_TIME.components[2].model_copy(update={"dist": Capped(dist=LogNormal(median=0.49, sigma=0.7), max=300)}),
    ) + TOOL_TIME.components[3:])  # fmt: skip
    inside = [value for value in draws(wrong, 20_000) if 0.0 < value < 300.0]
    assert stats.kstest(inside, conditional_cdf(TOOL_TIME, below=300.0)).pvalue < 1e-6


def test_integer_uniform_draws_every_value_and_its_cdf_steps():
    dist = PRESETS["agent-turns"]
    values = draws(dist, 5_000)
    assert set(values) == {float(n) for n in range(8, 16)}
    assert dist.cdf(7.9) == 0 and dist.cdf(8) == pytest.approx(1 / 8) and dist.cdf(15) == 1
    assert stats.chisquare([values.count(float(n)) for n in range(8, 16)]).pvalue > 0.001


def test_draws_are_fixed_by_the_seed():
    assert draws(TOOL_TIME, 100, seed=3) == draws(TOOL_TIME, 100, seed=3)
    assert draws(TOOL_TIME, 100, seed=3) != draws(TOOL_TIME, 100, seed=4)


def test_a_number_a_preset_and_json_all_parse():
    assert parse_distribution("0.5", "--tool-time-s") == 0.5
    assert parse_distribution("swe-agent-tool-time", "--tool-time-s") == TOOL_TIME
    parsed = parse_distribution('{"kind": "capped", "max": 9, "dist": {"kind": "fixed", "value": 12}}', "--x")
    assert parsed == Capped(dist=Fixed(value=12), max=9) and parsed.sample(random.Random(0)) == 9
    assert parse_distribution(TOOL_TIME.model_dump_json(), "--x") == TOOL_TIME
    assert IntUniform(low=2, high=2).mean == 2


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("swe-agent", ["--tool-time-s 'swe-agent'", "swe-agent-tool-time"]),
        ('{"kind": "lognormal", "median": 1', ["not valid JSON"]),
        ('{"kind": "lognormal", "median": -1, "sigma": 1}', ["lognormal.median", "greater than 0"]),
        ('{"kind": "gamma"}', ["'gamma'", "lognormal"]),
        ('{"kind": "uniform", "low": 3, "high": 1}', ["low < high"]),
    ],
)
def test_bad_input_is_one_line_naming_it(text, names):
    with pytest.raises(ValueError) as raised:
        parse_distribution(text, "--tool-time-s")
    message = str(raised.value)
    assert "\n" not in message and all(name in message for name in names), message


def test_the_mean_of_a_capped_mixture_is_the_mean_of_its_capped_draws():
    capped = Capped(dist=TOOL_TIME, max=10.0)
    values = draws(capped, 200_000)
    assert max(values) == 10.0
    assert capped.mean == pytest.approx(sum(values) / len(values), rel=0.02)
    assert Capped(dist=Capped(dist=LogNormal(median=1, sigma=1), max=3), max=2).mean == pytest.approx(
        Capped(dist=LogNormal(median=1, sigma=1), max=2).mean)
