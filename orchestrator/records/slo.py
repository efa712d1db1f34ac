"""Service-level objectives (pure): a typed SLO parsed from ``--slo jct_p90=60s,ttft_p99=2s``, and whether a cell
(one or several trials of it) meets it, with confidence, and at what goodput.

Targets. ``jct`` is a job's completion time from its arrival; ``ttft`` a request's time to its first token from its
scheduled time (the client's view, as the records measure it); ``tbt`` a request's mean time between tokens after
the first (vLLM's TPOT). Each target is a statistic (``pNN`` or ``mean``) of one of them and a limit in seconds.
A job that did not complete and a request that got no first token are misses: they count as slower than any limit,
so a policy that times jobs out never meets an SLO by dropping them (``MISS_S``).

Meeting it. Each target's statistic gets a 95% interval (``records.intervals``: over the jobs or requests of one
trial, over trials when there are several). A target is met when the whole interval is within the limit, missed
when the whole interval is beyond it, and unsure otherwise; the cell meets the SLO when every target is met and
misses it when any is missed. "Met" therefore means met with confidence, not on a lucky draw of jobs.

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

from orchestrator.records.intervals import Interval, interval
from orchestrator.records.schema import JobStatus, RequestStatus
from orchestrator.validation import InputError

METRICS = {"jct": "job completion time", "ttft": "time to first token", "tbt": "time between tokens"}
# A miss (a job that did not complete, a request with no first token) as a time: finite, so interpolated
# percentiles and bootstrap intervals stay numbers, and beyond any limit anyone sets.
MISS_S = 1e9
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

    def statistic(self, values: np.ndarray) -> np.ndarray:
        """The target's statistic over the last axis (so it takes a batch of bootstrap resamples too)."""
        if self.percentile is None:
            return values.mean(axis=-1)
        return np.percentile(values, self.percentile, axis=-1)


@dataclass(frozen=True)
class Slo:
    targets: tuple[Target, ...]

    @classmethod
    def parse(cls, text: str) -> Slo:
        """The SLO ``text`` names (``jct_p90=60s,ttft_p99=2s``); ``InputError`` naming the bad part otherwise."""
        targets = []
        for part in (part.strip() for part in text.split(",")):
            match = _TARGET.match(part.lower())
            if not match or match["metric"] not in METRICS:
                raise InputError(f"--slo {text!r}: cannot read {part!r}; {_VALID}")
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
    more than one)."""

    jct_s: np.ndarray
    job_worst_ttft_s: np.ndarray
    job_worst_tbt_s: np.ndarray
    ttft_s: np.ndarray
    tbt_s: np.ndarray

    def values(self, metric: str) -> np.ndarray:
        return {"jct": self.jct_s, "ttft": self.ttft_s, "tbt": self.tbt_s}[metric]

    @classmethod
    def of_frames(cls, jobs: pd.DataFrame, requests: pd.DataFrame) -> Trial:
        """From a cell's ``jobs`` and ``requests`` rows (``records.schema.to_row``'s columns)."""
        requests = requests.reindex(columns=REQUEST_COLUMNS)  # a cell whose jobs sent nothing has no columns
        completed = (jobs.status == JobStatus.COMPLETED.value).to_numpy()
        jct = np.where(completed, jobs.finished_at.to_numpy(dtype=float) - jobs.arrival_at.to_numpy(dtype=float), MISS_S)
        first = requests.first_token_at.to_numpy(dtype=float)
        ttft = np.nan_to_num(first - requests.scheduled_at.to_numpy(dtype=float), nan=MISS_S)
        tokens = requests.completion_tokens.to_numpy(dtype=float)
        streamed = requests.finished_at.to_numpy(dtype=float) - first
        ok = (requests.status == RequestStatus.OK.value).to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            tbt = np.where(ok & (tokens > 1), streamed / (tokens - 1), np.where(ok, np.nan, MISS_S))
        per_request = pd.DataFrame({"job_index": requests.job_index.to_numpy(), "ttft": ttft, "tbt": tbt})
        worst = per_request.groupby("job_index").max().reindex(jobs.job_index.to_numpy())
        return cls(
            jct_s=jct,
            job_worst_ttft_s=worst.ttft.fillna(MISS_S).to_numpy(),
            job_worst_tbt_s=worst.tbt.fillna(0.0).to_numpy(),
            ttft_s=ttft,
            tbt_s=tbt[~np.isnan(tbt)],
        )

    def good(self, slo: Slo) -> np.ndarray:
        """Per job, 1.0 where it is within every limit of ``slo``, else 0.0."""
        within = ((self.jct_s < MISS_S) & (self.jct_s <= slo.limit("jct")) & (self.job_worst_ttft_s <= slo.limit("ttft"))
                  & (self.job_worst_tbt_s <= slo.limit("tbt")))  # fmt: skip
        return within.astype(float)


@dataclass(frozen=True)
class TargetOutcome:
    target: Target
    value: Interval  # the statistic, seconds; a value at or past ``MISS_S`` is a miss
    met: Met


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
    """Whether the trials of one cell meet ``slo`` (module docstring), and the share of good jobs."""
    outcomes = []
    for target in slo.targets:
        samples = [(trial.values(target.metric),) for trial in trials]
        if any(not len(values) for (values,) in samples):  # e.g. no request streamed two tokens: nothing to judge
            outcomes.append(TargetOutcome(target, Interval(math.nan, -math.inf, math.inf), Met.UNSURE))
            continue
        value = interval(samples, target.statistic)
        met = Met.MET if value.hi <= target.limit_s else Met.MISSED if value.lo > target.limit_s else Met.UNSURE
        outcomes.append(TargetOutcome(target, value, met))
    good = interval([(trial.good(slo) * 100,) for trial in trials], lambda share: share.mean(axis=-1))
    return SloOutcome(slo, good, tuple(outcomes))
