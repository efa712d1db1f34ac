"""Measured beside predicted: each measured cell's error, the simulator's error per GPU type, and what each verdict
rests on (pure)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from orchestrator.analysis.plots import _verdict_square
from orchestrator.analysis.predicted import (
    BOTH,
    MEASURED,
    PREDICTED,
    error_by_gpu,
    prediction_errors,
    standing_verdicts,
    verdict_bases,
)
from orchestrator.records.prediction import read_predictions
from orchestrator.records.verdict import TOO_CLOSE, Verdict, VerdictKind


def _predictions() -> pd.DataFrame:
    rows = []
    for gpu, jps, policy, predicted in [("H100", 2, "fcfs", 11.0), ("H100", 2, "continuum", 9.0),
                                        ("H100", 4, "fcfs", 30.0), ("H100", 4, "continuum", 20.0),
                                        ("H200", 2, "fcfs", 8.0), ("H200", 2, "continuum", 8.0)]:  # fmt: skip
        rows.append({"cell_key": f"{gpu}-{jps}-{policy}", "gpu": gpu, "policy": policy, "jps": jps, "dram_gb": 64.0,
                     "replicas": 1, "router": None, "tp": 1, "jct_mean_s": predicted, "band": 0.1,
                     "sim_version": "v", "predicted_unix": PREDICTED_AT})  # fmt: skip
    return pd.DataFrame(rows)


PREDICTED_AT = 1_000.0  # every prediction made then; a cell measured since started after


def _summary(measured: dict[str, float], started_unix: float = PREDICTED_AT + 60) -> pd.DataFrame:
    real = [{"cell_key": key, "engine": "vllm", "status": "done", "jct_censored_mean_s": jct,
             "started_unix": started_unix} for key, jct in measured.items()]  # fmt: skip
    return pd.DataFrame(real + [{"cell_key": "H100-4-continuum", "engine": "vllm", "status": "pending",
                                 "jct_censored_mean_s": None, "started_unix": None}])  # fmt: skip


def _verdict(gpu: str, jps: float, engine: str, kind: VerdictKind, leader: str, note: str = "") -> Verdict:
    return Verdict(gpu=gpu, dram_gb=64.0, jps=jps, engine=engine, kind=kind, leader=leader, tied_with=(),
                   margin_pct=12.0, margin_lo_pct=8.0, margin_hi_pct=16.0, num_trials=1, note=note,
                   within_sim_error=note.startswith(TOO_CLOSE))  # fmt: skip


def test_each_measured_cell_has_its_error_and_each_gpu_type_its_rms_bias_worst_and_share_within_the_band():
    errors = prediction_errors(_predictions(), _summary({"H100-2-fcfs": 10.0, "H100-2-continuum": 10.0,
                                                         "H100-4-fcfs": 25.0}))  # fmt: skip
    assert list(errors.error_pct) == pytest.approx([10.0, -10.0, 20.0])
    assert list(errors.within_band) == [True, True, False]
    (h100,) = error_by_gpu(errors).to_dict("records")
    assert h100["cells"] == 3 and h100["left_out"] == 0 and h100["rms_error_pct"] == pytest.approx((600 / 3) ** 0.5)
    assert h100["mean_error_pct"] == pytest.approx(20 / 3) and h100["worst_error_pct"] == 20.0
    assert h100["within_band_pct"] == pytest.approx(200 / 3)


def test_a_cell_measured_before_its_prediction_or_of_unknown_order_is_listed_but_not_held_out(tmp_path):
    summary = _summary({"H100-2-fcfs": 10.0, "H100-2-continuum": 10.0, "H100-4-fcfs": 25.0})
    summary.loc[summary.cell_key == "H100-2-continuum", "started_unix"] = PREDICTED_AT - 3600  # measured an hour before
    predictions = _predictions()
    predictions.loc[predictions.cell_key == "H100-4-fcfs", "predicted_unix"] = None  # a prediction that does not say
    errors = prediction_errors(predictions, summary)
    assert list(errors.held_out) == [True, False, False]
    (h100,) = error_by_gpu(errors).to_dict("records")
    assert (h100["cells"], h100["left_out"], h100["rms_error_pct"]) == (1, 2, pytest.approx(10.0))
    # A predictions.csv written before predictions said when they were made reads as of unknown order.
    older = tmp_path / "predictions.csv"
    predictions.drop(columns=["predicted_unix"]).to_csv(older, index=False)
    assert {p.predicted_unix for p in read_predictions(older).values()} == {None}
    assert not prediction_errors(pd.read_csv(older), summary).held_out.any()
    (none_held,) = error_by_gpu(prediction_errors(pd.read_csv(older), summary)).to_dict("records")
    assert (none_held["cells"], none_held["left_out"]) == (0, 3) and math.isnan(none_held["rms_error_pct"])


def test_a_verdict_rests_on_measured_cells_predictions_or_both_and_its_open_question_says_what_was_measured():
    summary = _summary({"H100-2-fcfs": 10.0, "H100-2-continuum": 10.0, "H100-4-fcfs": 25.0})
    found = [_verdict("H100", 2, "sim", VerdictKind.WIN, "continuum"),
             _verdict("H100", 2, "vllm", VerdictKind.TIE, "fcfs"),
             _verdict("H100", 4, "sim", VerdictKind.TIE, "continuum", "too close to call in simulation; measure ..."),
             _verdict("H100", 4, "vllm", VerdictKind.UNDECIDED, "fcfs"),  # one policy measured: no measured verdict
             _verdict("H200", 2, "sim", VerdictKind.TIE, "fcfs")]  # fmt: skip
    bases = {basis.point: basis for basis in verdict_bases(found, _predictions(), summary)}
    measured, both, predicted = bases[("H100", 64.0, 2.0, 1)], bases[("H100", 64.0, 4.0, 1)], bases[("H200", 64.0, 2.0, 1)]
    assert (measured.rests_on, measured.standing.engine, measured.predicted.label) == (MEASURED, "vllm", "continuum")
    assert (both.rests_on, both.standing.engine, both.measured_policies, both.open_policies) == (
        BOTH, "sim", ("fcfs",), ("continuum",))
    assert (predicted.rests_on, predicted.standing.engine) == (PREDICTED, "sim")
    simulated_only = _verdict("L40S", 2, "sim", VerdictKind.TIE, "fcfs")  # a type no prediction covers keeps its own
    standing = {(v.gpu, v.jps): v for v in standing_verdicts(list(bases.values()), found + [simulated_only])}
    assert standing[("L40S", 2)] is simulated_only
    assert [standing[(gpu, jps)].engine for gpu, jps in [("H100", 2), ("H100", 4), ("H200", 2)]] == ["vllm", "sim", "sim"]
    assert standing[("H100", 4)].note == "too close to call in simulation; measured since: fcfs; still open: continuum"


def test_a_trade_off_labels_the_faster_policy_as_a_win_labels_its_leader():
    trade_off = Verdict(gpu="H100", dram_gb=64.0, jps=8, engine="vllm", kind=VerdictKind.TRADE_OFF, leader="fcfs",
                        tied_with=(), margin_pct=-100.0, margin_lo_pct=-120.0, margin_hi_pct=-80.0, num_trials=1,
                        faster="continuum", faster_by_pct=50.0, jobs_lost=6, num_jobs=30)  # fmt: skip
    win = _verdict("H100", 8, "vllm", VerdictKind.WIN, "continuum")
    assert "continuum +50%" in _verdict_square(trade_off, {})[0]  # its job time 50% lower, as a win's +12% says
    assert "continuum\n+12%" in _verdict_square(win, {"continuum": (0, 0, 0)})[0]
