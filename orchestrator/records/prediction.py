"""A real cell's prediction by the simulator, and how far its measurement landed from it (pure).

A budgeted sweep predicts every cell it may measure before it measures any: each cell's simulated twin (the same
cell with ``engine=sim``, on the same schedule) gives its censored mean job time, which carries the simulator's
error band for that GPU type and policy (``sim/error_bands.py``), and the time it was made. ``predictions.csv`` in
the sweep's directory holds a row per cell; a measured cell's summary row and MLflow run carry its prediction and the
error.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd


@dataclass(frozen=True)
class Prediction:
    cell_key: str  # the real cell's
    twin_key: str  # its simulated twin's, whose records the prediction is
    jct_mean_s: float  # censored mean job time (a job cut short counts to its cut), as verdicts compare
    band: float  # the simulator's relative error for the cell's GPU type and policy
    span_s: float | None  # first arrival to last job's end: the cell's load, for the cost model
    completion_pct: float | None
    sim_version: str  # ``sim/version.py``: which simulator predicted it
    # When the simulator made it (wall clock, Unix seconds): its twin's end. A measured cell is held out where its
    # attempt started after this; None in files written before predictions carried it (their order is unknown).
    predicted_unix: float | None = None

    def judged(self, measured_jct_s: float | None) -> dict:
        """The columns a measured cell's summary gets: its prediction, the band and the simulator's error."""
        return {"predicted_jct_mean_s": self.jct_mean_s, "predicted_band_pct": self.band * 100,
                "sim_error_pct": relative_error_pct(self.jct_mean_s, measured_jct_s)}  # fmt: skip


def relative_error_pct(predicted: float, measured: float | None) -> float | None:
    """The simulator's error: (predicted - measured) / measured, in percent; None without a measurement."""
    if measured is None or not measured > 0:
        return None
    return (predicted - measured) / measured * 100


def within_band(error_pct: float, band_pct: float) -> bool:
    return abs(error_pct) <= band_pct


def predictions_frame(predictions: list[Prediction], described: dict[str, dict]) -> pd.DataFrame:
    """``predictions.csv``: per cell its description (``described`` by cell key: label, GPU, policy, load...) and
    its prediction."""
    return pd.DataFrame([described[p.cell_key] | asdict(p) for p in predictions])


def read_predictions(path: Path) -> dict[str, Prediction]:
    """The predictions of ``predictions.csv`` by cell key; none where the file is absent. A column an older file
    lacks reads as None."""
    if not path.exists():
        return {}
    frame = pd.read_csv(path)
    names = Prediction.__dataclass_fields__
    return {row["cell_key"]: Prediction(**{name: _value(row.get(name)) for name in names})
            for row in frame.to_dict("records")}  # fmt: skip


def _value(value):
    return None if isinstance(value, float) and math.isnan(value) else value
