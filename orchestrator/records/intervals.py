"""Confidence intervals for statistics of per-job arrays (pure).

- Comparisons (``interval``): a paired percentile bootstrap over the jobs of one trial, or a Student-t interval over
  trials; ``analysis/verdicts.py`` says when each applies and why.
- Percentiles (``percentile_interval``): distribution-free, from order statistics. For a sample of n independent
  draws, the k-th smallest lies above the true p-quantile with the probability that a Binomial(n, p) count stays
  below k, whatever the distribution; the interval takes the ranks that make each end wrong with at most half of
  ``1 - CONFIDENCE``. Unlike a bootstrap, whose upper end can never pass the slowest draw, it has no upper end at all
  until n is large enough (``num_needed``: 36 draws for a p90, 368 for a p99), and its ends hold at the tails.
  Values that are correlated in groups (the requests of one job) are judged as if each group were one draw (the
  ranks of ``num_groups`` draws, scaled to the values): the worst case of the correlation, so never narrower than
  the truth.
- Groups resampled whole (``cluster_bootstrap``): a statistic over correlated values (a job's requests) resampled
  by group.
- Shares (``share_interval``): the Clopper-Pearson interval of a proportion.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
BOOTSTRAP_SAMPLES = 2000


@dataclass(frozen=True)
class Interval:
    estimate: float
    lo: float
    hi: float

    def excludes(self, value: float) -> bool:
        return not self.lo <= value <= self.hi


def interval(trials: list[tuple[np.ndarray, ...]], statistic: Callable[..., np.ndarray], seed: int = 0) -> Interval:
    """A ``CONFIDENCE`` interval for ``statistic`` over aligned per-job arrays, one tuple per trial.
    ``statistic`` takes the arrays and reduces their last axis (so it also takes a batch of resamples).
    One trial: a percentile bootstrap over its jobs (rows resampled together, so paired arrays stay
    paired). Several: a Student-t interval around the mean of the per-trial statistics."""
    per_trial = np.array([float(statistic(*arrays)) for arrays in trials])
    estimate = float(per_trial.mean())
    if len(trials) == 1:
        arrays = trials[0]
        num_jobs = len(arrays[0])
        if num_jobs < 2:
            return Interval(estimate, -math.inf, math.inf)
        rows = np.random.default_rng(seed).integers(0, num_jobs, size=(BOOTSTRAP_SAMPLES, num_jobs))
        resampled = statistic(*(array[rows] for array in arrays))
        tail = (1 - CONFIDENCE) / 2 * 100
        lo, hi = np.percentile(resampled, [tail, 100 - tail])
        return Interval(estimate, float(lo), float(hi))
    spread = per_trial.std(ddof=1) / math.sqrt(len(per_trial))
    half = float(stats.t.ppf(1 - (1 - CONFIDENCE) / 2, len(per_trial) - 1) * spread)
    return Interval(estimate, estimate - half, estimate + half)


def num_needed(percentile: float, confidence: float = CONFIDENCE) -> int:
    """The fewest independent draws whose order statistics bound the ``percentile``-th percentile from above: below
    that, even the slowest draw is under the true percentile too often for the interval's confidence."""
    quantile = percentile / 100
    return math.ceil(math.log((1 - confidence) / 2) / math.log(quantile) - 1e-9)


@functools.lru_cache(maxsize=1024)  # a capacity search and the benchmark ask the same counts again
def order_statistic_ranks(num: int, percentile: float, confidence: float = CONFIDENCE) -> tuple[int | None, int | None]:
    """1-based ranks (lo, hi) of the order statistics of ``num`` independent draws that bound the ``percentile``-th
    percentile, each end wrong with probability at most ``(1 - confidence) / 2`` (exactly so for a continuous
    distribution); None for an end that ``num`` draws cannot give."""
    if num == 0:
        return None, None
    tail = (1 - confidence) / 2
    cdf = stats.binom.cdf(np.arange(num + 1), num, percentile / 100)  # at most k draws below the percentile
    # The l-th draw lies above the percentile when fewer than l draws fall below it: P = cdf[l - 1], kept <= tail.
    too_high = np.flatnonzero(cdf <= tail)
    lo = int(too_high[-1]) + 1 if len(too_high) else None
    # The u-th draw lies below it when u or more fall below: P = 1 - cdf[u - 1], kept <= tail.
    hi = int(np.argmax(cdf >= 1 - tail)) + 1
    return lo, hi if hi <= num else None


def sample_percentile(values: np.ndarray, percentile: float) -> float:
    """The ``percentile``-th percentile by linear interpolation, but infinite where the interpolation reaches an
    infinite value (a miss): a percentile half-way to a miss is not a time."""
    ordered = np.sort(np.asarray(values, dtype=float))
    position = (len(ordered) - 1) * percentile / 100
    below, above = ordered[math.floor(position)], ordered[math.ceil(position)]
    return math.inf if math.isinf(above) else float(below + (above - below) * (position - math.floor(position)))


def percentile_interval(values: np.ndarray, percentile: float, num_groups: int | None = None) -> Interval:
    """The ``percentile``-th percentile of ``values`` with its distribution-free interval (module docstring); an end
    the draws cannot give is infinite. ``num_groups``: the values come from that many independent groups (jobs)."""
    ordered = np.sort(np.asarray(values, dtype=float))
    num = len(ordered)
    groups = num if num_groups is None else num_groups
    lo_rank, hi_rank = order_statistic_ranks(groups, percentile)
    # Rank r of g groups is the r-th group's last value if the groups' values were all equal: scaled to the values.
    lo = -math.inf if lo_rank is None else float(ordered[(lo_rank - 1) * num // groups])
    hi = math.inf if hi_rank is None else float(ordered[math.ceil(hi_rank * num / groups) - 1])
    return Interval(sample_percentile(ordered, percentile), lo, hi)


def cluster_bootstrap(values: np.ndarray, groups: np.ndarray, statistic: Callable[[np.ndarray, np.ndarray], np.ndarray],
                      seed: int = 0) -> tuple[float, float]:  # fmt: skip
    """A percentile bootstrap interval (lo, hi) of a weighted statistic, resampling whole ``groups`` (a label per
    value). ``statistic(sorted_values, weights)`` takes the values in ascending order and a batch of weight rows (each
    value's group drawn that many times) and reduces the last axis. The ends are order statistics of the resampled
    statistics (no interpolation), so infinite values pass through."""
    order = np.argsort(values, kind="stable")
    ordered = np.asarray(values, dtype=float)[order]
    _, codes = np.unique(np.asarray(groups)[order], return_inverse=True)
    num_groups = int(codes.max()) + 1
    rng = np.random.default_rng(seed)
    resampled = []
    for size in _batches(BOOTSTRAP_SAMPLES, max(1, 2_000_000 // max(1, len(ordered)))):
        counts = rng.multinomial(num_groups, [1 / num_groups] * num_groups, size=size)
        resampled.append(statistic(ordered, counts[:, codes].astype(float)))
    draws = np.concatenate(resampled)
    tail = (1 - CONFIDENCE) / 2 * 100
    return (float(np.percentile(draws, tail, method="inverted_cdf")),
            float(np.percentile(draws, 100 - tail, method="inverted_cdf")))  # fmt: skip


def weighted_percentile(percentile: float) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """For ``cluster_bootstrap``: the first sorted value whose cumulative weight reaches the percentile."""

    def statistic(ordered: np.ndarray, weights: np.ndarray) -> np.ndarray:
        cumulative = np.cumsum(weights, axis=-1)
        reached = cumulative >= cumulative[..., -1:] * percentile / 100
        return ordered[np.argmax(reached, axis=-1)]

    return statistic


def weighted_mean(ordered: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """For ``cluster_bootstrap``: the mean of the resampled values."""
    return (weights * ordered).sum(axis=-1) / weights.sum(axis=-1)


def share_interval(successes: int, num: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Clopper-Pearson interval (lo, hi) of a proportion seen as ``successes`` of ``num``."""
    tail = (1 - confidence) / 2
    lo = 0.0 if successes == 0 else float(stats.beta.ppf(tail, successes, num - successes + 1))
    hi = 1.0 if successes == num else float(stats.beta.ppf(1 - tail, successes + 1, num - successes))
    return lo, hi


def _batches(total: int, size: int) -> list[int]:
    return [min(size, total - start) for start in range(0, total, size)]


def mean_time(times: np.ndarray) -> np.ndarray:
    return times.mean(axis=-1)


def margin_pct(leader: np.ndarray, rival: np.ndarray) -> np.ndarray:
    """How much lower the leader's mean job time is than the rival's, in percent of the rival's."""
    return (rival.mean(axis=-1) - leader.mean(axis=-1)) / rival.mean(axis=-1) * 100


def censored_times(arrival_at: np.ndarray, finished_at: np.ndarray) -> np.ndarray:
    """Each job's time from arrival to its end: a completed job's completion time, a job that timed out or
    failed at the moment it was cut (it took at least that). A job with no end at all (no answer before its
    cell ended) is censored at the longest time any job of the cell ran, the least it can have taken."""
    spans = np.asarray(finished_at, dtype=float) - np.asarray(arrival_at, dtype=float)
    missing = np.isnan(spans)
    if missing.any():
        spans[missing] = np.nanmax(spans) if not missing.all() else 0.0
    return spans
