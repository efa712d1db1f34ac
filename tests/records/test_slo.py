"""The SLO: parsed from the command line with one clear line for bad input, and judged with confidence, a job that
did not complete counting as a miss."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from orchestrator.records.slo import MISS_S, Met, Slo, Trial, evaluate
from orchestrator.validation import InputError


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


def test_several_trials_are_judged_over_trials():
    """Three trials that agree are met; three whose p90s spread across the limit are unsure."""
    slo = Slo.parse("jct_p90=60s")
    steady = [_trial(list(np.linspace(10, 40, 50) + shift)) for shift in (0, 1, 2)]
    assert evaluate(slo, steady).met is Met.MET
    spread = [_trial(list(np.linspace(10, top, 50))) for top in (40, 70, 90)]
    assert evaluate(slo, spread).met is Met.UNSURE
