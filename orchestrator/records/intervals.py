"""Confidence intervals for statistics of per-job arrays (pure): a paired percentile bootstrap over the jobs of
one trial, or a Student-t interval over trials. ``analysis/verdicts.py`` says when each applies and why."""

from __future__ import annotations

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
