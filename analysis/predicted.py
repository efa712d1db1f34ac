"""Measured beside predicted, for a sweep whose cells were predicted before they were measured (``--gpu-budget``;
pure functions of frames and verdicts).

- Each measured cell with its prediction, band and the simulator's error on it, and whether it is held out: its
  attempt started after its prediction was made (``Prediction.predicted_unix`` against the summary's
  ``started_unix``). A cell measured before its prediction (the simulator may have been fitted to it since) or of an
  unknown order (a prediction that does not say when it was made) is not.
- Per GPU type, the simulator's error over the held-out cells only, with how many it rests on and how many measured
  cells it leaves out: the figure that says how far to trust the cells still predicted.
- Per comparison, what its verdict rests on: measured cells (every policy measured), predictions (none), or both
  (some measured: the verdict is still the prediction's, the measured cells checking their part of it). Where the
  simulator could not call a comparison, what has been measured since and what is still open.

The predicted verdicts come from the simulated twins, which the rest of the report hides where their cell was
measured (``analysis.load``): they are computed here from the whole summary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from orchestrator.budget.priority import point as comparison
from orchestrator.budget.priority import verdict_point
from orchestrator.records.arm import arm_name
from orchestrator.records.cell import CellStatus
from orchestrator.records.prediction import relative_error_pct, within_band
from orchestrator.records.verdict import TOO_CLOSE, Verdict

SIM = "sim"
MEASURED, PREDICTED, BOTH = "measured", "predicted", "both"


def measured_rows(summary: pd.DataFrame) -> pd.DataFrame:
    return summary[(summary.engine != SIM) & (summary.status == CellStatus.DONE.value)]


def prediction_errors(predictions: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """Per measured cell: its prediction with its band, the measurement, the error (predicted - measured, in
    percent of the measured; censored mean job times on both sides, as the verdicts compare them), and whether it is
    held out (its attempt started after its prediction was made; a time either side does not give counts as not)."""
    measured = measured_rows(summary).assign(started_unix=_column(summary, "started_unix"))
    joined = predictions.assign(predicted_unix=_column(predictions, "predicted_unix")).merge(
        measured[["cell_key", "jct_censored_mean_s", "started_unix"]], on="cell_key")  # fmt: skip
    error = [relative_error_pct(p, m) for p, m in zip(joined.jct_mean_s, joined.jct_censored_mean_s)]
    band = joined.band * 100
    held_out = (joined.started_unix.astype(float) > joined.predicted_unix.astype(float)).to_numpy()  # NaN: False
    return pd.DataFrame({
        "gpu": joined.gpu, "policy": joined.policy, "jps": joined.jps, "dram_gb": joined.dram_gb,
        "predicted_jct_s": joined.jct_mean_s, "band_pct": band, "predicted_lo_s": joined.jct_mean_s * (1 - joined.band),
        "predicted_hi_s": joined.jct_mean_s * (1 + joined.band), "measured_jct_s": joined.jct_censored_mean_s,
        "error_pct": error, "within_band": [within_band(e, b) for e, b in zip(error, band)], "held_out": held_out,
    })  # fmt: skip


def error_by_gpu(errors: pd.DataFrame) -> pd.DataFrame:
    """Per GPU type, the simulator's held-out error: over its held-out cells (``cells``, what it rests on; the
    measured cells not held out are counted in ``left_out``), the RMS, mean (its bias: above 0, it predicts slower
    than measured), the worst, and the share within their band; NaN where no cell of the type is held out."""
    rows = []
    for gpu, group in errors.groupby("gpu"):
        held = group[group.held_out.astype(bool)]
        rows.append({"gpu": gpu, "cells": len(held), "left_out": len(group) - len(held)} | _errors(held))
    return pd.DataFrame(rows, columns=["gpu", "cells", "left_out", "rms_error_pct", "mean_error_pct", "worst_error_pct",
                                       "within_band_pct"])  # fmt: skip


def _errors(cells: pd.DataFrame) -> dict[str, float]:
    if not len(cells):
        return dict.fromkeys(["rms_error_pct", "mean_error_pct", "worst_error_pct", "within_band_pct"], float("nan"))
    error = cells.error_pct.astype(float)
    return {"rms_error_pct": float(np.sqrt((error**2).mean())), "mean_error_pct": float(error.mean()),
            "worst_error_pct": float(error.loc[error.abs().idxmax()]),
            "within_band_pct": float(cells.within_band.mean() * 100)}  # fmt: skip


@dataclass(frozen=True)
class Basis:
    """One comparison: what its verdict rests on, the verdict that stands, and what the measurement checked."""

    point: tuple  # gpu (with its TP), DRAM budget, load, replicas, as verdicts name them
    rests_on: str  # measured, predicted or both
    standing: Verdict  # the measured verdict where every policy was measured, else the predicted one
    predicted: Verdict | None
    measured: Verdict | None  # only where every policy of the comparison was measured
    measured_policies: tuple[str, ...]
    open_policies: tuple[str, ...]


def verdict_bases(found: list[Verdict], predictions: pd.DataFrame, summary: pd.DataFrame) -> list[Basis]:
    """Per comparison of the predicted cells, what its verdict rests on."""
    done = set(measured_rows(summary).cell_key)
    cells = predictions.assign(point=[comparison(r.gpu, int(r.tp), r.dram_gb, r.jps, r.replicas)
                                      for r in predictions.itertuples()],
                               arm=[_arm(row) for row in predictions.itertuples()])  # fmt: skip
    predicted = {verdict_point(v): v for v in found if v.engine == SIM}
    measured = {verdict_point(v): v for v in found if v.engine != SIM}
    bases = []
    for point, group in cells.groupby("point", sort=True):
        cell_done = group.cell_key.isin(done)
        # An arm is measured when all its cells (every seed and trial) are.
        ran = tuple(sorted(arm for arm, of_arm in group.groupby("arm") if of_arm.cell_key.isin(done).all()))
        open_ = tuple(sorted(set(group.arm) - set(ran)))
        rests_on = MEASURED if not open_ else PREDICTED if not cell_done.any() else BOTH
        measured_verdict = measured.get(point) if rests_on == MEASURED else None
        standing = measured_verdict or predicted.get(point)
        if standing is not None:
            bases.append(Basis(point, rests_on, standing, predicted.get(point), measured_verdict, ran, open_))
    return bases


def basis_table(bases: list[Basis]) -> pd.DataFrame:
    rows = [{"gpu": b.point[0], "dram_gb": b.point[1], "jps": b.point[2], "replicas": b.point[3],
             "rests_on": b.rests_on, "verdict": b.standing.in_words(),
             "predicted": b.predicted.in_words() if b.predicted else "",
             "agrees": (b.predicted.label == b.measured.label) if b.predicted and b.measured else None,
             "measured_policies": ", ".join(b.measured_policies), "still_open": ", ".join(b.open_policies)}
            for b in bases]  # fmt: skip
    return pd.DataFrame(rows, columns=["gpu", "dram_gb", "jps", "replicas", "rests_on", "verdict", "predicted", "agrees",
                                       "measured_policies", "still_open"])  # fmt: skip


def standing_verdicts(bases: list[Basis], found: list[Verdict]) -> list[Verdict]:
    """One verdict per comparison, the one that stands; where the simulator could not call it ("too close to call in
    simulation"), its note says what has been measured since and what is still open. Comparisons no prediction
    covers (a type the sweep only simulates) keep their verdict from ``found``."""
    covered = {basis.point for basis in bases}
    standing = [verdict for verdict in found if verdict_point(verdict) not in covered]
    for basis in bases:
        verdict = basis.standing
        uncalled = basis.predicted is not None and basis.predicted.within_sim_error
        if uncalled and basis.rests_on == MEASURED:
            verdict = replace(verdict, note=f"{TOO_CLOSE}; measured since: {verdict.in_words()}")
        elif uncalled and basis.rests_on == BOTH:
            verdict = replace(verdict, note=f"{TOO_CLOSE}; measured since: "
                              f"{', '.join(basis.measured_policies)}; still open: {', '.join(basis.open_policies)}")  # fmt: skip
        standing.append(verdict)
    return standing


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    """``frame``'s column ``name``, or NaN throughout where an older file lacks it."""
    return frame[name] if name in frame.columns else pd.Series(np.nan, index=frame.index)


def _arm(row) -> str:
    return arm_name(row.policy, row.router if isinstance(row.router, str) else None)
