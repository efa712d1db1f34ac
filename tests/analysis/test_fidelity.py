"""The shape a simulated cell is judged on, from records and a trace written by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from orchestrator.analysis.fidelity import cell_shape, error_by_policy, peak_turns, shape_row
from orchestrator.records.scheduler_trace import Admit, Finish, FinishAction, Step


def _requests(rows: list[tuple[str, int, float, float, int, int]]) -> pd.DataFrame:
    """(job, turn, sent_at, latency, cached, best cached) per request."""
    return pd.DataFrame(rows, columns=["job_id", "turn", "sent_at", "latency_s", "cached_tokens", "best_cached_tokens"])


def _step(t: float, preempted: int) -> Step:
    return Step(t, 1, 1, 0, 1, 10, 0, 10, 10.0, 100, 0, preempted)


def _admit(t: float, job: str, turn: int) -> Admit:
    return Admit(t, f"{job}-{turn}", job, turn, 100, 0, 100)


def _finish(t: float, job: str, turn: int) -> Finish:
    return Finish(t, f"{job}-{turn}", job, turn, False, FinishAction.FREE, 100)


REQUESTS = _requests([
    ("a", 1, 0.0, 1.0, 0, 0), ("a", 2, 2.0, 4.0, 90, 100), ("a", 3, 7.0, 0.5, 150, 200),
    ("b", 1, 1.0, 2.0, 0, 0), ("b", 2, 4.0, 2.0, 100, 100), ("b", 3, 7.0, 1.5, 50, 200),
])  # fmt: skip
JOBS = pd.DataFrame({"job_index": [0, 1], "arrival_at": [0.0, 1.0], "finished_at": [7.5, math.nan],
                     "status": ["completed", "timeout"]})  # fmt: skip
TRACE = [_admit(0.5, "a", 1), _step(0.6, 0), _finish(0.9, "a", 1), _admit(1.0, "b", 1), _step(1.2, 2),
         _admit(1.5, "b", 1), _finish(2.0, "b", 1), _admit(3.0, "a", 2), _step(5.0, 1), _admit(4.0, "b", 2),
         _admit(7.25, "a", 3), _admit(8.0, "b", 3), _finish(8.5, "c", 1)]  # fmt: skip


def test_the_shape_of_a_cell_from_its_records_and_trace():
    shape = cell_shape(REQUESTS, JOBS, TRACE)
    # b never finished: censored at the longest time a job of the cell ran (a's 7.5 s).
    assert shape.jct_mean_s == pytest.approx(7.5) and shape.completed_pct == 50
    assert shape.turn_mean_s == {1: 1.5, 2: 3.0, 3: 1.0} and shape.spike_turn == 2
    assert shape.later_mean_s == pytest.approx(1.0)
    assert shape.cached_of_best == pytest.approx(200 / 400)
    assert shape.num_preemptions == 3
    # Only a1 and b1 were both admitted and finished in the trace; b1's readmission does not restart its clock.
    assert shape.engine_mean_s == pytest.approx((0.4 + 1.0) / 2)
    assert shape.wait_mean_s == pytest.approx((0.6 + 1.0) / 2)


def test_a_row_sets_both_shapes_side_by_side_with_the_error_and_the_spike_check():
    measured = cell_shape(REQUESTS, JOBS, TRACE)
    # With two jobs the measurement cannot tell turn 1 from its peak at turn 2 (b's two turns took as long),
    # but it can tell turn 3 (faster in both jobs).
    assert measured.spike_turns == (1, 2)
    late_spike = REQUESTS.assign(latency_s=REQUESTS.latency_s.where(REQUESTS.turn != 3, 5.0))
    simulated = cell_shape(late_spike, JOBS.assign(finished_at=[6.0, 7.0], status="completed"), TRACE)
    row = shape_row(measured, simulated)
    assert row["jct_mean_s_real"] == pytest.approx(7.5) and row["jct_mean_s_sim"] == pytest.approx(6.0)
    assert row["jct_error"] == pytest.approx(-0.2)
    assert not row["spike_same"] and (row["spike_turn_real"], row["spike_turn_sim"]) == (2, 3)
    early_spike = REQUESTS.assign(latency_s=REQUESTS.latency_s.where(REQUESTS.turn != 2, 0.1))
    assert shape_row(measured, cell_shape(early_spike, JOBS, TRACE))["spike_same"]
    assert shape_row(measured, measured)["jct_error"] == 0 and shape_row(measured, measured)["spike_same"]


def test_the_error_band_of_a_policy_is_the_rms_of_its_cells_errors():
    rows = pd.DataFrame({"policy": ["fcfs", "fcfs", "continuum"], "jct_error": [0.3, -0.4, 0.1]})
    bands = error_by_policy(rows)
    assert bands["fcfs"] == pytest.approx(math.sqrt((0.09 + 0.16) / 2)) and bands["continuum"] == pytest.approx(0.1)


def test_the_peak_holds_the_turns_the_measurement_cannot_tell_from_it():
    rng = np.random.default_rng(1)
    jobs = [f"j{i}" for i in range(40)]
    peak = 2.0 + rng.normal(0, 0.3, len(jobs))
    rows = [(job, 1, 1.0 + noise) for job, noise in zip(jobs, rng.normal(0, 0.3, len(jobs)))]
    rows += [(job, 2, latency) for job, latency in zip(jobs, peak)]
    # Turn 3 takes what turn 2 did, give or take 1%: a tie. Turn 4 takes 10% less in every job: not one.
    rows += [(job, 3, latency * (1.01 if i % 2 else 0.99)) for i, (job, latency) in enumerate(zip(jobs, peak))]
    rows += [(job, 4, latency * 0.9) for job, latency in zip(jobs, peak)]
    requests = pd.DataFrame(rows, columns=["job_id", "turn", "latency_s"])
    assert set(peak_turns(requests)) == {2, 3}
    assert peak_turns(requests[requests.turn != 3]) == (2,)