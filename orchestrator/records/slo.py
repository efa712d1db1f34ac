"""Service-level objectives (pure): a typed SLO parsed from ``--slo jct_p90=60s,ttft_p99=2s``, and whether a cell
(one or several trials of it) meets it, with confidence, and at what goodput.

Targets. ``jct`` is a job's completion time from its arrival; ``ttft`` a request's time to its first token from its
scheduled time (the client's view, as the records measure it); ``tbt`` a request's mean time between tokens after
the first (vLLM's TPOT). Each target is a statistic (``pNN`` or ``mean``) of one of them and a limit in seconds.
A job that did not complete and a request that got no first token are misses: they count as slower than any limit,
so a policy that times jobs out never meets an SLO by dropping them (``MISS_S``).

Meeting it. Each target's statistic gets a 95% interval over the jobs of every trial of the cell, pooled (each trial
is more jobs of the same cell; ``records.intervals``):

- a percentile: distribution-free, from the order statistics of the jobs (of the requests, for ``ttft`` and ``tbt``,
  ranked as if each job's requests were one draw, since they are correlated). Too few jobs bound no percentile from
  above (fewer than 36 for a p90, 368 for a p99): such a target is never met, only missed or unsure, and the outcome
  says how many jobs would do (``jobs_needed``);
- a mean: a bootstrap over the jobs (a request-level mean resamples whole jobs). A miss makes the mean beyond any limit:
  with one miss or more, a mean target is missed, whatever the other jobs did.

A target is met when the whole interval is within the limit, missed when the whole interval is beyond it, and
unsure otherwise; the cell meets the SLO when every target is met and misses it when any is missed. "Met" therefore
means met with confidence, not on a lucky draw of jobs: where the true statistic is beyond its limit, a target is
called met in at most 2.5% of cells (``benchmarks/slo_judging.py`` measures it).

Goodput. A job is good when it completed, its time is within every ``jct`` limit and each of its requests is
within every ``ttft`` and ``tbt`` limit (as vLLM's benchmark counts a good request). Goodput is the good share of
the jobs times the offered load, in jobs per second, with the interval of that share.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from orchestrator.inputs.validation import InputError
from orchestrator.records.intervals import (
    Interval,
    cluster_bootstrap,
    num_needed,
    percentile_interval,
    share_interval,
    weighted_mean,
    weighted_percentile,
)
from orchestrator.records.schema import JobStatus, RequestStatus

METRICS = {"jct": "job completion time", "ttft": "time to first token", "tbt": "time between tokens"}
# A miss (a job that did not complete, a request with no first token) as a time: beyond any limit anyone sets. The
# intervals take it as it is (order statistics, never interpolated into), and a statistic it decides is infinite.
MISS_S = math.inf
_TARGET = re.compile(r"^(?P<metric>[a-z]+)_(?P<stat>mean|p\d+(?:\.\d+)?)=(?P<value>\d+(?:\.\d+)?)(?P<unit>ms|s)?$")
_VALID = ("valid: comma-separated METRIC_STAT=TIME with METRIC one of jct, ttft, tbt, STAT mean or a percentile "
          "pNN (p50, p90, p99.9), TIME in s or ms; e.g. jct_p90=60s,ttft_p99=2s")  # fmt: skip


REQUEST_COLUMNS = ["job_index", "status", "scheduled_at", "first_token_at", "finished_at", "completion_tokens"]


class Met(str, enum.Enum):
    MET = "met"  # within the limit at the interval's worse end
    MISSED = "missed"  # beyond the limit at the interval's better end
    UNSURE = "unsure"  # the interval straddles the limit: more jobs or trials would tell


@dataclass(frozen=True)
class Target:
    metric: str  # jct, ttft or tbt
    percentile: float | None  # None: the mean
    limit_s: float

    @property
    def name(self) -> str:
        return f"{self.metric}_{'mean' if self.percentile is None else f'p{self.percentile:g}'}"

    def __str__(self) -> str:
        return f"{self.name}={self.limit_s:g}s"


@dataclass(frozen=True)
class Slo:
    targets: tuple[Target, ...]

    @classmethod
    def parse(cls, text: str) -> Slo:
        """The SLO ``text`` names (``jct_p90=60s,ttft_p99=2s``); ``InputError`` naming the bad part otherwise."""
        targets = []
        for part in (part.strip() for part in text.split(",")):
            match = _TARGET.match(part.lower())
            name, _, time = part.partition("=")
            if not match and re.fullmatch(r"-\d+(?:\.\d+)?(?:ms|s)?", time.strip().lower()):
                raise InputError(f"--slo {text!r}: {part!r} sets a negative time; valid: a time above 0, in s or ms "
                                 f"(e.g. {name.strip()}=2s)")  # fmt: skip
            if not match:
                raise InputError(f"--slo {text!r}: cannot read {part!r}; {_VALID}")
            if match["metric"] not in METRICS:
                metrics = ", ".join(f"{metric} ({meaning})" for metric, meaning in METRICS.items())
                raise InputError(f"--slo {text!r}: unknown metric {match['metric']!r}; valid: {metrics}, as "
                                 f"METRIC_STAT=TIME (e.g. jct_p90=60s)")  # fmt: skip
            percentile = None if match["stat"] == "mean" else float(match["stat"][1:])
            if percentile is not None and not 0 < percentile < 100:
                raise InputError(f"--slo {text!r}: percentile {match['stat']} must lie above p0 and below p100; {_VALID}")
            limit = float(match["value"]) / (1000 if match["unit"] == "ms" else 1)
            if not limit > 0:
                raise InputError(f"--slo {text!r}: {part!r} sets a limit of 0; {_VALID}")
            targets.append(Target(match["metric"], percentile, limit))
        names = [target.name for target in targets]
        if len(set(names)) < len(names):
            raise InputError(f"--slo {text!r}: a target is named twice; {_VALID}")
        return cls(tuple(targets))

    def __str__(self) -> str:
        return ",".join(map(str, self.targets))

    def limit(self, metric: str) -> float:
        """The strictest limit on ``metric``: what one job or request must be within to count as good."""
        return min((target.limit_s for target in self.targets if target.metric == metric), default=math.inf)


@dataclass(frozen=True)
class Trial:
    """One trial's times, misses at ``MISS_S``: per job (its completion time; the worst time to first token and
    between tokens of its requests) and per request (time to first token; time between tokens where it streamed
    more than one), each request value with its job's index (``*_job``) so that a job's requests stay together."""

    jct_s: np.ndarray
    job_worst_ttft_s: np.ndarray
    job_worst_tbt_s: np.ndarray
    ttft_s: np.ndarray
    tbt_s: np.ndarray
    ttft_job: np.ndarray
    tbt_job: np.ndarray

    def values(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """The ``metric``'s values and, for each, the index of the job it belongs to."""
        if metric == "jct":
            return self.jct_s, np.arange(len(self.jct_s))
        return {"ttft": (self.ttft_s, self.ttft_job), "tbt": (self.tbt_s, self.tbt_job)}[metric]

    @classmethod
    def of_frames(cls, jobs: pd.DataFrame, requests: pd.DataFrame) -> Trial:
        """From a cell's ``jobs`` and ``requests`` rows (``records.schema.to_row``'s columns)."""
        requests = requests.reindex(columns=REQUEST_COLUMNS)  # a cell whose jobs sent nothing has no columns
        completed = (jobs.status == JobStatus.COMPLETED.value).to_numpy()
        jct = np.where(completed, jobs.finished_at.to_numpy(dtype=float) - jobs.arrival_at.to_numpy(dtype=float), MISS_S)
        first = requests.first_token_at.to_numpy(dtype=float)
        ttft = np.nan_to_num(first - requests.scheduled_at.to_numpy(dtype=float), nan=MISS_S, posinf=MISS_S)
        tokens = requests.completion_tokens.to_numpy(dtype=float)
        streamed = requests.finished_at.to_numpy(dtype=float) - first
        ok = (requests.status == RequestStatus.OK.value).to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            tbt = np.where(ok & (tokens > 1), streamed / (tokens - 1), np.where(ok, np.nan, MISS_S))
        job_index = requests.job_index.to_numpy()
        per_request = pd.DataFrame({"job_index": job_index, "ttft": ttft, "tbt": tbt})
        worst = per_request.groupby("job_index").max().reindex(jobs.job_index.to_numpy())
        streamed_two = ~np.isnan(tbt)
        return cls(
            jct_s=jct,
            job_worst_ttft_s=worst.ttft.fillna(MISS_S).to_numpy(),
            job_worst_tbt_s=worst.tbt.fillna(0.0).to_numpy(),
            ttft_s=ttft,
            tbt_s=tbt[streamed_two],
            ttft_job=job_index,
            tbt_job=job_index[streamed_two],
        )

    def good(self, slo: Slo) -> np.ndarray:
        """Per job, True where it is within every limit of ``slo``."""
        return ((self.jct_s < MISS_S) & (self.jct_s <= slo.limit("jct")) & (self.job_worst_ttft_s <= slo.limit("ttft"))
                & (self.job_worst_tbt_s <= slo.limit("tbt")))  # fmt: skip


@dataclass(frozen=True)
class TargetOutcome:
    target: Target
    value: Interval  # the statistic, seconds; infinite where misses decide it (or an end the jobs cannot bound)
    met: Met
    num_jobs: int  # the jobs it was judged over, every trial's
    num_misses: int  # of its values: jobs (or requests) that did not complete
    jobs_needed: int | None = None  # where too few jobs bound the percentile: the fewest that could

    def in_words(self) -> str:
        value = self.value
        upper = "unbounded" if value.hi == math.inf and not self.num_misses else _seconds(value.hi)
        text = f"{self.target}: {self.met.value}, {_seconds(value.estimate)} [{_seconds(value.lo)}, {upper}]"
        text += f" over {self.num_jobs} jobs"
        if self.num_misses:
            text += f", {self.num_misses} missed"
        if self.jobs_needed is not None:
            text += f" ({self.jobs_needed} jobs or more bound its {self.target.name.split('_')[1]})"
        return text


@dataclass(frozen=True)
class SloOutcome:
    slo: Slo
    good_pct: Interval  # the share of jobs within every limit
    targets: tuple[TargetOutcome, ...]

    @property
    def met(self) -> Met:
        states = {outcome.met for outcome in self.targets}
        if Met.MISSED in states:
            return Met.MISSED
        return Met.UNSURE if Met.UNSURE in states else Met.MET

    def goodput_jps(self, offered_jps: float) -> Interval:
        share = self.good_pct
        return Interval(share.estimate * offered_jps / 100, share.lo * offered_jps / 100, share.hi * offered_jps / 100)


def evaluate(slo: Slo, trials: list[Trial]) -> SloOutcome:
    """Whether the trials of one cell, their jobs pooled, meet ``slo`` (module docstring), and the share of good jobs."""
    outcomes = tuple(judge(target, *_pooled(trials, target.metric)) for target in slo.targets)
    good = np.concatenate([trial.good(slo) for trial in trials])
    lo, hi = share_interval(int(good.sum()), len(good)) if len(good) else (0.0, 1.0)
    estimate = float(good.mean()) * 100 if len(good) else math.nan
    return SloOutcome(slo, Interval(estimate, lo * 100, hi * 100), outcomes)


def judge(target: Target, values: np.ndarray, jobs: np.ndarray) -> TargetOutcome:
    """``target`` judged over ``values``, each of the job labelled in ``jobs`` (jobs are the independent draws)."""
    num_jobs, num_misses = len(np.unique(jobs)), int(np.isinf(values).sum())
    if not len(values):  # e.g. no request streamed two tokens: nothing to judge
        return TargetOutcome(target, Interval(math.nan, -math.inf, math.inf), Met.UNSURE, 0, 0)
    per_job = num_jobs == len(values)
    if target.percentile is None:
        if num_misses:  # slower than any limit: the mean is beyond it whatever the other jobs took
            return TargetOutcome(target, Interval(math.inf, math.inf, math.inf), Met.MISSED, num_jobs, num_misses)
        value = Interval(float(values.mean()), *cluster_bootstrap(values, jobs, weighted_mean))
    else:
        value = percentile_interval(values, target.percentile, num_jobs)
        if not per_job:  # resampled by job too, and never narrower than either
            lo, hi = cluster_bootstrap(values, jobs, weighted_percentile(target.percentile))
            value = Interval(value.estimate, min(value.lo, lo), max(value.hi, hi))
    met = Met.MET if value.hi <= target.limit_s else Met.MISSED if value.lo > target.limit_s else Met.UNSURE
    needed = num_needed(target.percentile) if target.percentile is not None else None
    too_few = met is Met.UNSURE and needed is not None and num_jobs < needed
    return TargetOutcome(target, value, met, num_jobs, num_misses, needed if too_few else None)


def _pooled(trials: list[Trial], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Every trial's values of ``metric`` together, with job labels that no two trials share."""
    values, jobs, offset = [], [], 0
    for trial in trials:
        trial_values, trial_jobs = trial.values(metric)
        values.append(np.asarray(trial_values, dtype=float))
        jobs.append(np.asarray(trial_jobs, dtype=np.int64) + offset)
        offset += int(np.max(trial_jobs, initial=-1)) + 1
    return np.concatenate(values), np.concatenate(jobs)


def _seconds(value: float) -> str:
    return "a miss" if value == math.inf else "-" if math.isinf(value) or math.isnan(value) else f"{value:.3g} s"
