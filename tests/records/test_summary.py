from __future__ import annotations

import pandas as pd
import pytest

from orchestrator.records.layout import CellFiles
from orchestrator.records.schema import JobRecord, JobStatus, RequestRecord, RequestStatus
from orchestrator.records.store import write_cell_records
from orchestrator.records.summary import summarize


def _request(job: int, turn: int, *, scheduled: float, finished: float, prompt: int, cached: int, best: int,
             status=RequestStatus.OK) -> RequestRecord:
    return RequestRecord(
        job_id=f"j{job}", job_index=job, turn=turn, is_last=turn == 2, status=status, scheduled_at=scheduled,
        sent_at=scheduled + 0.001, first_token_at=scheduled + 0.1, finished_at=finished,
        target_prompt_tokens=prompt, prompt_tokens=prompt, cached_tokens=cached, best_cached_tokens=best,
        completion_tokens=20, error=None,
    )


@pytest.fixture
def records():
    requests = [
        _request(0, 1, scheduled=0.0, finished=1.0, prompt=100, cached=0, best=0),
        _request(0, 2, scheduled=1.5, finished=2.0, prompt=300, cached=96, best=120),
        _request(1, 1, scheduled=1.0, finished=4.0, prompt=100, cached=0, best=0),
        _request(1, 2, scheduled=4.5, finished=7.0, prompt=300, cached=120, best=120),
        _request(2, 1, scheduled=2.0, finished=9.0, prompt=100, cached=None, best=0, status=RequestStatus.TIMEOUT),
    ]
    jobs = [
        JobRecord("j0", 0, JobStatus.COMPLETED, arrival_at=0.0, finished_at=2.0, num_turns_completed=2),
        JobRecord("j1", 1, JobStatus.COMPLETED, arrival_at=1.0, finished_at=7.0, num_turns_completed=2),
        JobRecord("j2", 2, JobStatus.TIMEOUT, arrival_at=2.0, finished_at=9.0, num_turns_completed=0),
    ]
    return requests, jobs


def test_jct_counts_only_completed_jobs_and_timeouts_are_counted(records):
    summary = summarize(*records)
    assert (summary.num_jobs, summary.num_completed, summary.num_timeouts) == (3, 2, 1)
    assert summary.jct_mean_s == pytest.approx((2.0 + 6.0) / 2)
    assert summary.jct_p50_s == pytest.approx(4.0)


def test_the_censored_mean_keeps_the_timed_out_job_at_its_cut_with_an_interval_over_the_jobs(records):
    summary = summarize(*records)
    assert summary.jct_censored_mean_s == pytest.approx((2.0 + 6.0 + 7.0) / 3)  # j2 ran 7 s before it was cut
    assert summary.jct_censored_lo_s <= summary.jct_censored_mean_s <= summary.jct_censored_hi_s
    assert summary.jct_censored_lo_s >= 2.0 and summary.jct_censored_hi_s <= 7.0  # within the jobs' own range
    assert summary.completion_pct == pytest.approx(200 / 3)


def test_turn_latency_is_from_the_scheduled_time_and_cache_fractions_are_token_weighted(records):
    summary = summarize(*records)
    assert summary.turn(1).latency_mean_s == pytest.approx((1.0 + 3.0) / 2)  # the timed-out one is excluded
    assert summary.turn(1).num_requests == 3
    second = summary.turn(2)
    assert second.latency_mean_s == pytest.approx((0.5 + 2.5) / 2)
    assert second.cached_fraction == pytest.approx(216 / 600)
    assert second.best_cached_fraction == pytest.approx(240 / 600)
    assert second.cached_of_best == pytest.approx(216 / 240)
    assert summary.t_last_mean_s / summary.t1_mean_s == pytest.approx(1.5 / 2.0)


def test_records_round_trip_through_parquet(tmp_path, records):
    files = CellFiles(tmp_path)
    write_cell_records(files, *records)
    requests = pd.read_parquet(files.requests)
    jobs = pd.read_parquet(files.jobs)
    assert list(requests["status"]) == ["ok", "ok", "ok", "ok", "timeout"]
    assert requests["latency_s"].iloc[1] == pytest.approx(0.5)
    assert requests["dispatch_lag_s"].iloc[0] == pytest.approx(0.001)
    assert jobs["jct_s"].iloc[1] == pytest.approx(6.0) and pd.isna(jobs["jct_s"].iloc[2])
    assert set(requests["schema_version"]) == {1}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_jobs_of_different_lengths_give_t_last_from_each_jobs_own_last_turn():
    def request(job: int, turn: int, last: bool, latency: float, target: int) -> RequestRecord:
        return RequestRecord(
            job_id=f"j{job}", job_index=job, turn=turn, is_last=last, status=RequestStatus.OK, scheduled_at=0.0,
            sent_at=0.0, first_token_at=0.1, finished_at=latency, target_prompt_tokens=target,
            prompt_tokens=target, cached_tokens=0, best_cached_tokens=0, completion_tokens=20, error=None,
        )

    # j0 ends at turn 2, j1 at turn 4: T-last is over turns 2 and 4, not over the highest turn index.
    requests = [request(0, 1, False, 1.0, 100), request(0, 2, True, 3.0, 200),
                request(1, 1, False, 1.0, 100), request(1, 2, False, 2.0, 300),
                request(1, 3, False, 2.0, 400), request(1, 4, True, 5.0, 500)]  # fmt: skip
    jobs = [JobRecord(f"j{i}", i, JobStatus.COMPLETED, arrival_at=0.0, finished_at=9.0, num_turns_completed=n)
            for i, n in ((0, 2), (1, 4))]  # fmt: skip
    summary = summarize(requests, jobs)
    assert summary.t_last_mean_s == pytest.approx((3.0 + 5.0) / 2)
    assert summary.t_last_over_t1 == pytest.approx(4.0)
    assert [(turn.turn, turn.num_requests) for turn in summary.turns] == [(1, 2), (2, 2), (3, 1), (4, 1)]
    assert summary.turn(2).target_prompt_tokens == pytest.approx(250)  # the mean of the turn's targets


def test_a_cell_judged_against_an_slo_says_each_target_in_words_and_the_jobs_a_percentile_needs(records):
    from orchestrator.records.slo import Slo

    summary = summarize(*records, slo=Slo.parse("jct_p90=60s,jct_mean=60s"), offered_jps=1.0)
    assert summary.slo_met == "missed"  # one job timed out: the mean is beyond any limit
    p90, mean = summary.slo_targets.split("; ")
    assert p90.startswith("jct_p90=60s: unsure") and "over 3 jobs, 1 missed (36 jobs or more bound its p90)" in p90
    assert mean.startswith("jct_mean=60s: missed, a miss")
