"""The SLO: parsed from the command line with one clear line for bad input, and judged with confidence, a job that
did not complete counting as a miss."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from orchestrator.inputs.validation import InputError
from orchestrator.records.slo import MISS_S, Met, Slo, Target, Trial, evaluate, judge


def test_an_slo_reads_percentiles_means_and_units():
    slo = Slo.parse("jct_p90=60s, ttft_p99=2000ms,tbt_mean=0.05")
    assert [(t.metric, t.percentile, t.limit_s) for t in slo.targets] == [("jct", 90, 60), ("ttft", 99, 2), ("tbt", None, 0.05)]
    assert str(slo) == "jct_p90=60s,ttft_p99=2s,tbt_mean=0.05s"
    assert Slo.parse(str(slo)) == slo


@pytest.mark.parametrize("text", ["jct_p90=60x", "latency_p90=1s", "jct_p100=1s", "jct_p90=0s", "jct_p90", "",
                                  "jct_p90=1s,jct_p90=2s"])  # fmt: skip
def test_bad_slos_are_one_line_naming_the_value_and_what_is_valid(text):
    with pytest.raises(InputError) as error:
        Slo.parse(text)
    message = str(error.value)
    assert "\n" not in message and repr(text) in message and "valid:" in message


def _trial(jcts: list[float | None], ttfts: list[float | None] | None = None) -> Trial:
    """Jobs of one turn each: a None JCT did not complete; a None TTFT got no first token."""
    jobs = pd.DataFrame({"job_index": range(len(jcts)), "arrival_at": 0.0,
                         "status": ["completed" if jct is not None else "timeout" for jct in jcts],
                         "finished_at": [jct if jct is not None else 5.0 for jct in jcts]})  # fmt: skip
    ttfts = ttfts if ttfts is not None else [0.5] * len(jcts)
    requests = pd.DataFrame({"job_index": range(len(jcts)), "status": ["ok" if t is not None else "timeout" for t in ttfts],
                             "scheduled_at": 0.0, "first_token_at": [t if t is not None else np.nan for t in ttfts],
                             "finished_at": [jct if jct is not None else np.nan for jct in jcts],
                             "completion_tokens": 11})  # fmt: skip
    return Trial.of_frames(jobs, requests)


def test_a_cell_well_within_its_limit_meets_it_and_every_job_is_good():
    outcome = evaluate(Slo.parse("jct_p90=60s"), [_trial(list(np.linspace(10, 30, 200)))])
    assert outcome.met is Met.MET
    assert outcome.good_pct.estimate == 100 and outcome.goodput_jps(2.0).estimate == 2.0


def test_a_p90_on_the_limit_is_unsure_and_one_well_beyond_is_missed():
    times = list(np.linspace(10, 70, 200))  # p90 at 64 s
    assert evaluate(Slo.parse("jct_p90=64s"), [_trial(times)]).met is Met.UNSURE
    assert evaluate(Slo.parse("jct_p90=40s"), [_trial(times)]).met is Met.MISSED


def test_jobs_that_did_not_complete_are_misses_not_dropped():
    """A fifth of the jobs timed out: their p90 is a miss however fast the rest were."""
    trial = _trial([10.0] * 80 + [None] * 20)
    assert trial.jct_s.max() == MISS_S
    outcome = evaluate(Slo.parse("jct_p90=60s"), [trial])
    assert outcome.met is Met.MISSED and outcome.good_pct.estimate == pytest.approx(80)


def test_a_job_with_a_slow_first_token_is_not_good_and_the_ttft_target_is_judged_over_requests():
    trial = _trial([10.0] * 100, ttfts=[0.5] * 90 + [4.0] * 10)
    outcome = evaluate(Slo.parse("jct_p90=60s,ttft_p99=2s"), [trial])
    assert outcome.good_pct.estimate == pytest.approx(90)
    assert {t.target.name: t.met for t in outcome.targets} == {"jct_p90": Met.MET, "ttft_p99": Met.MISSED}
    assert outcome.met is Met.MISSED


def test_time_between_tokens_is_the_streaming_time_over_the_tokens_after_the_first():
    trial = _trial([10.5] * 10, ttfts=[0.5] * 10)  # 10 s for the 10 tokens after the first
    assert trial.tbt_s == pytest.approx([1.0] * 10)
    assert evaluate(Slo.parse("tbt_p50=0.5s"), [trial]).met is Met.MISSED


def test_several_trials_are_judged_over_their_jobs_pooled():
    """Three trials that agree are met; three whose pooled jobs put the p90 beyond the limit are missed."""
    slo = Slo.parse("jct_p90=60s")
    steady = [_trial(list(np.linspace(10, 40, 50) + shift)) for shift in (0, 1, 2)]
    assert evaluate(slo, steady).met is Met.MET and evaluate(slo, steady).targets[0].num_jobs == 150
    spread = [_trial(list(np.linspace(10, top, 50))) for top in (40, 70, 90)]
    assert evaluate(slo, spread).met is Met.MISSED


def _lognormal_cells(num_cells: int, num_jobs: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.lognormal(np.log(30), 0.5, num_jobs) for _ in range(num_cells)]


def _jct_trial(times: np.ndarray) -> Trial:
    """Jobs that completed in ``times``, with one request each that met every limit."""
    quick, jobs = np.zeros(len(times)), np.arange(len(times))
    return Trial(jct_s=times, job_worst_ttft_s=quick, job_worst_tbt_s=quick, ttft_s=quick, tbt_s=quick, ttft_job=jobs,
                 tbt_job=jobs)  # fmt: skip


def _true_lognormal_percentile(percentile: float) -> float:
    from scipy import stats

    return float(stats.lognorm(s=0.5, scale=30).ppf(percentile / 100))


@pytest.mark.parametrize(("percentile", "num_jobs", "num_trials"), [(99, 45, 1), (90, 11, 1), (99, 200, 1), (99, 45, 3),
                                                                     (99, 45, 5), (90, 100, 1), (90, 40, 3)])  # fmt: skip
def test_a_percentile_three_percent_over_its_limit_is_called_met_in_at_most_its_error_rate(percentile, num_jobs, num_trials):
    """Where the true percentile is 3% over the limit the answer is not "met": a 95% interval may say so in 2.5% of
    cells. Judged over a bootstrap of one trial or over the trials' own percentiles, "met" came out for 58% of such
    cells at p99 on 45 jobs, 28% at p90 on 11, 9% at p99 on 200, and 14% and 21% with 3 and 5 trials of 45 jobs."""
    slo = Slo((Target("jct", percentile, _true_lognormal_percentile(percentile) / 1.03),))
    draws = 400
    cells = _lognormal_cells(draws * num_trials, num_jobs)
    met = sum(evaluate(slo, [_jct_trial(times) for times in cells[i * num_trials:(i + 1) * num_trials]]).met is Met.MET
              for i in range(draws))  # fmt: skip
    assert met / draws <= 0.025 + 3 * np.sqrt(0.025 * 0.975 / draws)


def test_too_few_jobs_to_bound_a_percentile_are_unsure_and_say_how_many_would_do():
    """Eleven jobs well within a p90 limit: even the slowest of eleven lies under the true p90 a third of the time."""
    (target,) = evaluate(Slo.parse("jct_p90=60s"), [_trial([10.0 + i for i in range(11)])]).targets
    assert target.met is Met.UNSURE and target.jobs_needed == 36 and target.value.hi == np.inf
    assert "36 jobs or more" in target.in_words()
    (enough,) = evaluate(Slo.parse("jct_p90=60s"), [_trial([10.0 + i / 10 for i in range(36)])]).targets
    assert enough.met is Met.MET and enough.jobs_needed is None


def test_a_mean_target_with_a_miss_is_missed_since_the_miss_alone_decides_it():
    """One job in 100 timed out: a mean over jobs one of which took longer than any limit is beyond the limit (an
    interval over resampled jobs left it unsure, at an estimate of 1e7 s)."""
    (target,) = evaluate(Slo.parse("jct_mean=60s"), [_trial([10.0] * 99 + [None])]).targets
    assert target.met is Met.MISSED and target.value.estimate == np.inf and target.num_misses == 1


def test_a_percentile_that_reaches_the_misses_is_a_miss_not_a_time():
    """A tenth of the jobs timed out: the p90 sits between the last completed job and the first miss; it is reported
    as a miss, not as a time interpolated toward a stand-in (it was 1e8 s)."""
    (target,) = evaluate(Slo.parse("jct_p90=60s"), [_trial([10.0] * 90 + [None] * 10)]).targets
    assert target.value.estimate == np.inf and "a miss" in target.in_words()


def test_request_targets_count_a_jobs_requests_as_one_draw():
    """Each job's eight requests took the same time (as correlated as requests can be): the request-level p90 is
    judged as the jobs' p90 would be, not as 320 independent requests (resampled one by one, its interval was
    narrower and could call the target met)."""
    times = np.random.default_rng(1).lognormal(np.log(1.0), 0.5, 40)
    jobs = np.arange(40)
    per_job = judge(Target("ttft", 90, 2.0), times, jobs)
    per_request = judge(Target("ttft", 90, 2.0), np.repeat(times, 8), np.repeat(jobs, 8))
    assert per_request.num_jobs == 40
    assert per_request.value.lo <= per_job.value.lo and per_request.value.hi >= per_job.value.hi


def test_a_negative_time_and_an_unknown_metric_are_named_as_such():
    with pytest.raises(InputError) as negative:
        Slo.parse("jct_p90=60s,ttft_p99=-1s")
    assert str(negative.value) == ("--slo 'jct_p90=60s,ttft_p99=-1s': 'ttft_p99=-1s' sets a negative time; valid: "
                                   "a time above 0, in s or ms (e.g. ttft_p99=2s)")  # fmt: skip
    with pytest.raises(InputError) as unknown:
        Slo.parse("foo_p90=1s")
    assert str(unknown.value) == ("--slo 'foo_p90=1s': unknown metric 'foo'; valid: jct (job completion time), ttft "
                                  "(time to first token), tbt (time between tokens), as METRIC_STAT=TIME "
                                  "(e.g. jct_p90=60s)")  # fmt: skip
