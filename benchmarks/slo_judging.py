"""How often does an SLO target come out "met" when it is not? The judging method (``records/slo.py``) on known
distributions of job times, where the true percentile is known exactly.

For each distribution (lognormal; Pareto, a heavy tail; bimodal, a fifth of the jobs in a slow mode), number of jobs
per trial, percentile and number of trials, ``--draws`` cells are drawn and judged twice:

- ``met_over``: the limit 3% below the true percentile (the answer should be "missed" or "unsure"). A 95% interval
  allows 2.5%; a row is flagged ``!`` when its rate passes 2.5% by more than two Monte Carlo standard errors.
- ``met_under``: the limit 10% above it (the power: how often a cell that meets its target is called met), and
  ``too_few``: how often those cells were unsure because their jobs cannot bound the percentile at all.

The last line is one JSON object (the rows, and the worst ``met_over``).

    python benchmarks/slo_judging.py [--draws 2000] [--jobs 10 30 100 300 1000] [--percentiles 50 90 99]
                                     [--trials 1 3 5] [--distributions lognormal pareto bimodal] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
from scipy import optimize, stats

from orchestrator.records.slo import Met, Target, judge

OVER, UNDER = 1.03, 0.90  # the true statistic against the limit: 3% over it, 10% under it
ALLOWED = 0.025  # a 95% two-sided interval: wrong at its upper end in at most 2.5% of cells


@dataclass(frozen=True)
class Distribution:
    """Job times in seconds: a sampler and the exact quantile function."""

    name: str
    sample: Callable[[np.random.Generator, int], np.ndarray]
    quantile: Callable[[float], float]


def _lognormal() -> Distribution:
    law = stats.lognorm(s=0.5, scale=30.0)  # median 30 s
    return Distribution("lognormal", lambda rng, n: law.rvs(size=n, random_state=rng), law.ppf)


def _pareto() -> Distribution:
    law = stats.pareto(b=2.5, scale=20.0)  # at least 20 s, a tail with finite mean and infinite fourth moment
    return Distribution("pareto", lambda rng, n: law.rvs(size=n, random_state=rng), law.ppf)


def _bimodal() -> Distribution:
    fast, slow, slow_share = stats.lognorm(s=0.2, scale=20.0), stats.lognorm(s=0.2, scale=60.0), 0.2

    def sample(rng: np.random.Generator, n: int) -> np.ndarray:
        is_slow = rng.random(n) < slow_share
        return np.where(is_slow, slow.rvs(size=n, random_state=rng), fast.rvs(size=n, random_state=rng))

    def quantile(q: float) -> float:
        cdf = lambda x: (1 - slow_share) * fast.cdf(x) + slow_share * slow.cdf(x)  # noqa: E731
        return float(optimize.brentq(lambda x: cdf(x) - q, 1e-6, 1e4, xtol=1e-10))

    return Distribution("bimodal", sample, quantile)


DISTRIBUTIONS = {d.name: d for d in (_lognormal(), _pareto(), _bimodal())}


@dataclass(frozen=True)
class Row:
    distribution: str
    num_jobs: int  # per trial
    percentile: float
    num_trials: int
    met_over: float  # share of cells called met with the true statistic 3% over the limit
    met_under: float  # with it 10% under the limit
    too_few: float  # share of those cells unsure for too few jobs
    num_draws: int

    @property
    def flagged(self) -> bool:
        """Over the allowed rate by more than two Monte Carlo standard errors."""
        return self.met_over > ALLOWED + 2 * math.sqrt(ALLOWED * (1 - ALLOWED) / self.num_draws)


def row(distribution: Distribution, num_jobs: int, percentile: float, num_trials: int, draws: int, seed: int) -> Row:
    """``draws`` cells of ``num_trials`` trials of ``num_jobs`` jobs, each judged against both limits."""
    rng = np.random.default_rng(seed)
    truth = distribution.quantile(percentile / 100)
    over, under = Target("jct", percentile, truth / OVER), Target("jct", percentile, truth / UNDER)
    met_over = met_under = too_few = 0
    for _ in range(draws):
        times = distribution.sample(rng, num_jobs * num_trials)
        jobs = np.arange(len(times))
        met_over += judge(over, times, jobs).met is Met.MET
        judged = judge(under, times, jobs)
        met_under += judged.met is Met.MET
        too_few += judged.jobs_needed is not None
    return Row(distribution.name, num_jobs, percentile, num_trials, met_over / draws, met_under / draws, too_few / draws,
               draws)


def table(rows: list[Row]) -> str:
    lines = [f"{'distribution':<12} {'jobs':>5} {'pct':>5} {'trials':>6} {'met, 3% over':>13} {'met, 10% under':>15} "
             f"{'too few jobs':>13}"]  # fmt: skip
    for r in rows:
        lines.append(f"{r.distribution:<12} {r.num_jobs:>5} {'p' + format(r.percentile, 'g'):>5} {r.num_trials:>6} "
                     f"{r.met_over:>12.1%}{'!' if r.flagged else ' '} {r.met_under:>15.1%} {r.too_few:>13.1%}")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=2000, help="cells judged per row (default: 2000)")
    parser.add_argument("--jobs", type=int, nargs="+", default=[10, 30, 100, 300, 1000], help="jobs per trial")
    parser.add_argument("--percentiles", type=float, nargs="+", default=[50, 90, 99])
    parser.add_argument("--trials", type=int, nargs="+", default=[1, 3, 5], help="trials pooled per cell")
    parser.add_argument("--distributions", nargs="+", default=list(DISTRIBUTIONS), choices=list(DISTRIBUTIONS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = [row(DISTRIBUTIONS[name], jobs, percentile, trials, args.draws, args.seed + index)
            for index, (name, jobs, percentile, trials) in enumerate(
                (name, jobs, percentile, trials) for name in args.distributions for jobs in args.jobs
                for percentile in args.percentiles for trials in args.trials)]  # fmt: skip
    print(table(rows))
    worst = max(rows, key=lambda r: r.met_over)
    print(f"worst 'met' rate with the true statistic {OVER - 1:.0%} over its limit: {worst.met_over:.2%} "
          f"({worst.distribution}, {worst.num_jobs} jobs x {worst.num_trials} trials, p{worst.percentile:g}); "
          f"{sum(r.flagged for r in rows)} rows flagged over {ALLOWED:.1%} beyond Monte Carlo error ({args.draws} draws a row)")  # fmt: skip
    print(json.dumps({"draws": args.draws, "worst_met_over": worst.met_over, "flagged": sum(r.flagged for r in rows),
                      "rows": [asdict(r) for r in rows]}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
