"""Derived statistics of one cell, compiled from its raw records after the run (pure).

A quantity has one name from here to the report: ``CellSummary``'s scalar fields are the columns of
``summary.parquet`` and the metrics of the cell's MLflow run. Counts are ``n_*`` there (BRIEF section 6,
a contract other people's scripts read) rather than the ``num_*`` used inside the code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np
import pandas as pd

from orchestrator.records.intervals import Interval, censored_times, interval, mean_time
from orchestrator.records.pins import TRACE_KINDS, pin_outcomes, summarize_pins
from orchestrator.records.prediction import Prediction
from orchestrator.records.scheduler_trace_file import trace_events
from orchestrator.records.schema import JobRecord, JobStatus, RequestRecord
from orchestrator.records.slo import REQUEST_COLUMNS, Slo, Trial, evaluate


@dataclass(frozen=True)
class TurnSummary:
    """One turn index across all jobs that reached it (jobs of a parametric workload have different numbers of
    turns, so ``num_requests`` falls with the index); fractions are token-weighted over its successful requests."""

    turn: int
    num_requests: int
    latency_mean_s: float | None
    ttft_mean_s: float | None
    target_prompt_tokens: float | None  # mean over the successful requests, which ``prompt_tokens_mean`` measures
    prompt_tokens_mean: float | None
    cached_fraction: float | None  # cached / prompt tokens
    best_cached_fraction: float | None  # (previous prompt + completion) / prompt tokens
    cached_of_best: float | None  # cached / best: 1.0 means the prefix cache kept everything it could


@dataclass(frozen=True)
class CellSummary:
    num_jobs: int
    num_completed: int
    num_timeouts: int
    num_errors: int
    jct_mean_s: float | None
    jct_p50_s: float | None
    jct_p90_s: float | None
    jct_p99_s: float | None
    # Every job, a timed-out one at the time it was cut (a lower bound on the true mean), with the 95%
    # interval over the cell's jobs (records.intervals); and the share of jobs that completed.
    jct_censored_mean_s: float | None
    jct_censored_lo_s: float | None
    jct_censored_hi_s: float | None
    completion_pct: float | None
    dispatch_lag_p50_ms: float | None
    dispatch_lag_p99_ms: float | None
    dispatch_lag_max_ms: float | None
    span_s: float | None  # first arrival to last job end on the cell's clock (virtual time for the simulator)
    t1_mean_s: float | None  # the first turn's mean latency
    t_last_mean_s: float | None  # each job's last turn (T8 in the source study's workload), over the jobs
    t_last_over_t1: float | None
    # Continuum's pins by outcome (``records/pins.py``): percent of the cell's pins; none for other policies.
    num_pins: int
    pin_carried_pct: float | None
    pin_expired_pct: float | None
    pin_gave_way_pct: float | None
    pin_abandoned_pct: float | None
    pin_in_vain_block_s: float
    # Turns after the first: the share of their best possible prefix the cache gave them, and of those turns, how many
    # a router sent to another replica than their job's previous turn (0 with one replica).
    prefix_kept_pct: float | None
    turns_moved_pct: float | None
    turns: tuple[TurnSummary, ...]
    # Against the sweep's SLO (``--slo``; ``records/slo.py``), where it has one: the SLO, whether the cell meets it
    # with confidence (met, missed or unsure), and the share of its jobs within every limit with its interval.
    slo: str | None = None
    slo_met: str | None = None
    slo_targets: str | None = None  # each target in words: its statistic, interval, jobs, and jobs needed where too few
    good_pct: float | None = None
    good_lo_pct: float | None = None
    good_hi_pct: float | None = None
    goodput_jps: float | None = None  # that share of the offered load
    goodput_lo_jps: float | None = None
    goodput_hi_jps: float | None = None
    # Where the simulator predicted the cell first (a budgeted sweep; ``records/prediction.py``): its predicted
    # censored mean job time, the band it carries, and the prediction's error against the measurement.
    predicted_jct_mean_s: float | None = None
    predicted_band_pct: float | None = None
    sim_error_pct: float | None = None

    def turn(self, number: int) -> TurnSummary | None:
        return next((turn for turn in self.turns if turn.turn == number), None)

    def scalars(self) -> dict[str, float | int | None]:
        """Every field but the per-turn series, by its column and metric name."""
        return {spec.name: getattr(self, spec.name) for spec in fields(self) if spec.name != "turns"}

    @classmethod
    def of_parts(cls, scalars: dict, turns: list[dict]) -> CellSummary:
        """The summary again from its scalars (a done row holds them) and its turns as ``asdict`` wrote them."""
        names = {spec.name for spec in fields(cls)} - {"turns"}
        known = {name: scalars[name] for name in names if name in scalars}  # a cell done before a field existed lacks it
        return cls(**known, turns=tuple(TurnSummary(**turn) for turn in turns))


def summarize(requests: Sequence[RequestRecord], jobs: Sequence[JobRecord], scheduler_trace: bytes = b"",
              slo: Slo | None = None, offered_jps: float = 0.0, prediction: Prediction | None = None) -> CellSummary:  # fmt: skip
    """The cell's statistics from its records and, for its pins, its scheduler trace's contents; with ``slo``,
    whether it meets it and its goodput at the ``offered_jps`` its schedule arrived at; with ``prediction``, the
    simulator's error on it."""
    jcts = [job.jct_s for job in jobs if job.jct_s is not None]
    lags_ms = [record.dispatch_lag_s * 1000 for record in requests]
    censored = _censored_mean(jobs)
    turns = tuple(_turn_summary(turn, requests) for turn in sorted({record.turn for record in requests}))
    t1 = turns[0].latency_mean_s if turns and turns[0].turn == 1 else None
    t_last = _mean([record.latency_s for record in _succeeded(requests) if record.is_last])
    return CellSummary(
        num_jobs=len(jobs),
        num_completed=sum(job.status.is_completed for job in jobs),
        num_timeouts=sum(job.status is JobStatus.TIMEOUT for job in jobs),
        num_errors=sum(job.status is JobStatus.ERROR for job in jobs),
        jct_mean_s=_mean(jcts),
        jct_p50_s=_percentile(jcts, 50),
        jct_p90_s=_percentile(jcts, 90),
        jct_p99_s=_percentile(jcts, 99),
        jct_censored_mean_s=censored.estimate if censored else None,
        jct_censored_lo_s=censored.lo if censored else None,
        jct_censored_hi_s=censored.hi if censored else None,
        completion_pct=100 * sum(job.status.is_completed for job in jobs) / len(jobs) if jobs else None,
        dispatch_lag_p50_ms=_percentile(lags_ms, 50),
        dispatch_lag_p99_ms=_percentile(lags_ms, 99),
        dispatch_lag_max_ms=max(lags_ms) if lags_ms else None,
        span_s=_span(jobs),
        t1_mean_s=t1,
        t_last_mean_s=t_last,
        t_last_over_t1=t_last / t1 if t1 and t_last else None,
        **asdict(summarize_pins(pin_outcomes(trace_events(scheduler_trace, TRACE_KINDS), requests))),
        prefix_kept_pct=_prefix_kept_pct(requests),
        turns_moved_pct=_turns_moved_pct(requests),
        turns=turns,
        **(_against(slo, requests, jobs, offered_jps) if slo is not None and jobs else {}),
        **(prediction.judged(censored.estimate if censored else None) if prediction is not None else {}),
    )


def _against(slo: Slo, requests: Sequence[RequestRecord], jobs: Sequence[JobRecord], offered_jps: float) -> dict:
    outcome = evaluate(slo, [Trial.of_frames(*_slo_frames(requests, jobs))])
    good, goodput = outcome.good_pct, outcome.goodput_jps(offered_jps)
    return {"slo": str(slo), "slo_met": outcome.met.value,
            "slo_targets": "; ".join(target.in_words() for target in outcome.targets),
            "good_pct": good.estimate, "good_lo_pct": good.lo,
            "good_hi_pct": good.hi, "goodput_jps": goodput.estimate, "goodput_lo_jps": goodput.lo,
            "goodput_hi_jps": goodput.hi}  # fmt: skip


def _slo_frames(requests: Sequence[RequestRecord], jobs: Sequence[JobRecord]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The columns of the records that ``Trial.of_frames`` reads (a cell has thousands of requests: only these)."""
    job_frame = pd.DataFrame({"job_index": [job.job_index for job in jobs], "status": [job.status.value for job in jobs],
                              "arrival_at": [job.arrival_at for job in jobs],
                              "finished_at": [job.finished_at for job in jobs]})  # fmt: skip
    request_frame = pd.DataFrame({column: [getattr(record, column) for record in requests] for column in REQUEST_COLUMNS})
    request_frame["status"] = [record.status.value for record in requests]
    return job_frame, request_frame


def _prefix_kept_pct(requests: Sequence[RequestRecord]) -> float | None:
    later = [record for record in _succeeded(requests) if record.turn > 1 and record.cached_tokens is not None
             and record.best_cached_tokens]  # fmt: skip
    best = sum(record.best_cached_tokens for record in later)
    return 100 * sum(record.cached_tokens for record in later) / best if best else None


def _turns_moved_pct(requests: Sequence[RequestRecord]) -> float | None:
    replica_of = {(record.job_id, record.turn): record.replica for record in requests}
    later = [(job, turn) for job, turn in replica_of if turn > 1 and (job, turn - 1) in replica_of]
    moved = sum(replica_of[(job, turn)] != replica_of[(job, turn - 1)] for job, turn in later)
    return 100 * moved / len(later) if later else None


def _censored_mean(jobs: Sequence[JobRecord]) -> Interval | None:
    if not jobs:
        return None
    arrival = np.array([job.arrival_at for job in jobs])
    finished = np.array([np.nan if job.finished_at is None else job.finished_at for job in jobs])
    return interval([(censored_times(arrival, finished),)], mean_time)


def _span(jobs: Sequence[JobRecord]) -> float | None:
    ends = [job.finished_at for job in jobs if job.finished_at is not None]
    return max(ends) - min(job.arrival_at for job in jobs) if ends else None


def _turn_summary(turn: int, requests: Sequence[RequestRecord]) -> TurnSummary:
    of_turn = [record for record in requests if record.turn == turn]
    ok = _succeeded(of_turn)
    prompt = sum(record.prompt_tokens for record in ok)
    with_cache = [record for record in ok if record.cached_tokens is not None and record.best_cached_tokens is not None]
    cached = sum(record.cached_tokens for record in with_cache)
    best = sum(record.best_cached_tokens for record in with_cache)
    with_cache_prompt = sum(record.prompt_tokens for record in with_cache)
    return TurnSummary(
        turn=turn,
        num_requests=len(of_turn),
        latency_mean_s=_mean([record.latency_s for record in ok]),
        ttft_mean_s=_mean([record.ttft_s for record in ok if record.ttft_s is not None]),
        target_prompt_tokens=_mean([record.target_prompt_tokens for record in ok]),
        prompt_tokens_mean=prompt / len(ok) if ok else None,
        cached_fraction=cached / with_cache_prompt if with_cache_prompt else None,
        best_cached_fraction=best / with_cache_prompt if with_cache_prompt else None,
        cached_of_best=cached / best if best else None,
    )


def _succeeded(requests: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [record for record in requests if record.status.is_ok and record.prompt_tokens]


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _percentile(values: Sequence[float], percent: float) -> float | None:
    return float(np.percentile(values, percent)) if len(values) else None
