"""Verdicts: intervals that cover the truth about 95% of the time, ties where the margin is inside the
uncertainty, timed-out jobs kept at their censored time, and no winner that completed fewer jobs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from orchestrator.analysis.verdicts import PolicyRuns, cell_regimes, censored_job_times, verdict
from orchestrator.records.intervals import interval, margin_pct
from orchestrator.records.verdict import Verdict, VerdictKind, read_verdicts, verdict_frame
from orchestrator.sim.error_bands import SimErrors

TRUE_MARGIN_PCT = 10.0  # the leader's jobs take 10% less time than the rival's, in expectation


def _paired_jobs(rng: np.random.Generator, num_jobs: int, trial_factor: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Heavy-tailed job times of a rival, and the leader's on the same jobs: 10% faster in expectation, with
    per-job noise of its own (independent of the job's size, so the expected ratio is exact)."""
    rival = rng.lognormal(mean=3.0, sigma=0.8, size=num_jobs) * trial_factor
    leader = rival * (1 - TRUE_MARGIN_PCT / 100) * rng.uniform(0.8, 1.2, size=num_jobs)
    return leader, rival


def test_one_trials_job_bootstrap_covers_the_true_margin_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    num_runs, covered = 300, 0
    for run in range(num_runs):
        found = interval([_paired_jobs(rng, 400)], margin_pct, seed=run)
        covered += found.lo <= TRUE_MARGIN_PCT <= found.hi
    assert 0.90 <= covered / num_runs <= 0.985


def test_trials_t_interval_covers_the_true_margin_about_95_percent_of_the_time():
    # Run-to-run spread: each trial's rival runs slower or faster as a whole (the leader with it, since it
    # is paired job by job), and the trials are the unit of the interval.
    rng = np.random.default_rng(2)
    num_runs, covered = 400, 0
    for _ in range(num_runs):
        trials = [_paired_jobs(rng, 200, trial_factor=rng.uniform(0.7, 1.3)) for _ in range(3)]
        found = interval(trials, margin_pct)
        covered += found.lo <= TRUE_MARGIN_PCT <= found.hi
    assert 0.90 <= covered / num_runs <= 0.99


WHERE = {"gpu": "H100", "dram_gb": 400.0, "jps": 6.0, "engine": "vllm"}


def _runs(policy: str, times: list[np.ndarray], completed: list[np.ndarray] | None = None) -> PolicyRuns:
    return PolicyRuns(policy, times, completed or [np.ones_like(t) for t in times])


def test_a_clear_margin_is_a_significant_winner_and_equal_policies_tie():
    rng = np.random.default_rng(3)
    leader, rival = _paired_jobs(rng, 300)
    clear = verdict(WHERE, [_runs("continuum", [leader]), _runs("fcfs", [rival])])
    assert clear.label == "continuum" and clear.significant and clear.margin_lo_pct > 0
    assert clear.margin_lo_pct < TRUE_MARGIN_PCT < clear.margin_hi_pct and clear.num_trials == 1
    assert "no run-to-run spread" in clear.note
    same = verdict(WHERE, [_runs("continuum", [rival * 0.999]), _runs("fcfs", [rival * rng.uniform(0.99, 1.01, 300)])])
    assert same.label == "tie" and not same.significant and same.tied_with == ("continuum", "fcfs")


def test_a_faster_policy_that_lost_jobs_beyond_the_uncertainty_is_a_trade_off_not_a_winner_nor_a_tie(tmp_path):
    rng = np.random.default_rng(4)
    times = rng.lognormal(3.0, 0.5, 300)
    completed = np.ones(300)
    completed[:60] = 0  # 20% of its jobs timed out, censored early at a short cut
    quick_but_lossy = _runs("continuum", [times * 0.5], [completed])
    steady = _runs("fcfs", [times])
    found = verdict(WHERE, [quick_but_lossy, steady])
    assert found.kind is VerdictKind.TRADE_OFF and found.leader == "fcfs" and found.label == "trade-off"
    assert (found.faster, found.jobs_lost, found.num_jobs) == ("continuum", 60, 300) and not found.significant
    assert found.faster_by_pct == pytest.approx(50.0) and found.margin_pct == pytest.approx(-100.0)
    assert found.in_words() == ("trade-off: continuum's mean job time is 50% lower than fcfs's, but 60 of its 300 "
                                "jobs were lost (timed out or failed)")  # fmt: skip
    verdict_frame([found]).to_csv(tmp_path / "verdicts.csv", index=False)
    assert read_verdicts(tmp_path / "verdicts.csv") == [found]  # the file says as much as the value


def test_the_csv_keeps_the_contract_columns_first_and_reads_back_every_kind(tmp_path):
    rng = np.random.default_rng(3)
    leader, rival = _paired_jobs(rng, 300)
    found = [verdict(WHERE, [_runs("continuum", [leader]), _runs("fcfs", [rival])]),
             verdict(WHERE | {"jps": 1.0}, [_runs("continuum", [rival]), _runs("fcfs", [rival])]),
             verdict(WHERE | {"jps": 2.0}, [_runs("fcfs", [rival])])]  # fmt: skip
    table = verdict_frame(found)
    assert list(table.columns)[:12] == ["gpu", "dram_gb", "jps", "engine", "winner", "significant", "tied_with",
                                        "margin_pct", "margin_lo_pct", "margin_hi_pct", "num_trials", "note"]  # fmt: skip
    table.to_csv(tmp_path / "verdicts.csv", index=False)
    back = read_verdicts(tmp_path / "verdicts.csv")
    assert [v.label for v in back] == ["continuum", "tie", "undecided"] == [v.label for v in found]
    assert [v.in_words() for v in back] == [v.in_words() for v in found]
    assert isinstance(back[0], Verdict) and back[1].tied_with == ("continuum", "fcfs")


def test_a_simulated_margin_inside_the_simulators_error_is_too_close_to_call():
    rng = np.random.default_rng(5)
    leader, rival = _paired_jobs(rng, 600)
    runs = [_runs("continuum", [leader]), _runs("fcfs", [rival])]
    assert verdict(WHERE, runs).significant  # measured: 10% beyond the job-level uncertainty
    simulated = verdict(WHERE, runs, sim_error=SimErrors({"continuum": 0.19, "fcfs": 0.09}))  # a band of 21%
    assert simulated.label == "tie" and "too close to call in simulation" in simulated.note and simulated.within_sim_error
    assert not verdict(WHERE, runs).within_sim_error
    assert "continuum" in simulated.note and "fcfs" in simulated.note
    assert verdict(WHERE, runs, sim_error=SimErrors({"continuum": 0.02, "fcfs": 0.02})).significant
    # The GPU's own error joins the band: the same policies on a GPU whose roofline is 20% off are too close to call,
    # and a GPU no published figure checked takes the largest error of any GPU.
    uncertain_gpu = SimErrors({"continuum": 0.02, "fcfs": 0.02}, {WHERE["gpu"]: 0.2, "L4": 0.01})
    assert "too close to call in simulation" in verdict(WHERE, runs, sim_error=uncertain_gpu).note
    unmeasured_gpu = SimErrors({"continuum": 0.02, "fcfs": 0.02}, {"L4": 0.2})
    assert "too close to call in simulation" in verdict(WHERE, runs, sim_error=unmeasured_gpu).note
    assert verdict(WHERE, runs, sim_error=SimErrors({"continuum": 0.02, "fcfs": 0.02}, {WHERE["gpu"]: 0.01})).significant


def test_a_timed_out_job_counts_at_the_time_it_was_cut_never_dropped():
    jobs = pd.DataFrame({"job_index": [0, 1, 2], "status": ["completed", "timeout", "error"],
                         "arrival_at": [0.0, 1.0, 2.0], "finished_at": [10.0, 121.0, np.nan]})  # fmt: skip
    times = censored_job_times(jobs)
    assert list(times.time_s) == pytest.approx([10.0, 120.0, 120.0]) and list(times.completed) == [True, False, False]


def test_a_policys_measured_regime_is_one_with_its_evidence_or_how_many_trials_were_under_pressure():
    fits = {"prefix_kept_pct": 98.0, "num_preemptions": 0, "pin_gave_way_pct": 0.0}
    pressed = {"prefix_kept_pct": 12.0, "num_preemptions": 4, "pin_gave_way_pct": 0.0}
    assert cell_regimes(pd.DataFrame([pressed])) == "pressure (later turns kept 12% of their prefix, 4 preemptions)"
    assert cell_regimes(pd.DataFrame([fits, fits])) == "fits"
    assert cell_regimes(pd.DataFrame([fits, pressed, pressed])) == "pressure in 2 of 3 trials"
    assert cell_regimes(pd.DataFrame([{"prefix_kept_pct": np.nan}])) == ""
