"""Cells predicted before a GPU runs them, and each measured beside its prediction after.

``kvsweep evidence ... --predict-only FILE`` simulates every GPU cell that the same command would run (its cells,
source-study, pressure and capacity stages) with an engine stack (``sim.stacks``) and writes FILE (JSON) with a
Markdown page beside it: committed before the GPU runs, the cells are a test of the stack on cells no fit has seen.
Each cell is named by its folder in the evidence (``<stage>/<cell>``) and carries its key, its prediction
(``pressure.CellFacts``) and its band (the stack's, ``SimStack.errors``). The run given ``--predictions FILE``
checks first that the file predicts the cells it will run (the same names and keys), and ends with a stage that
sets each measured cell beside its prediction: the error of mean JCT and whether it fell within the band.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from orchestrator.cell.spec import CellSpec
from orchestrator.evidence.pack import StageResult, seconds
from orchestrator.evidence.pressure import CellFacts
from orchestrator.sim.stacks import get_stack
from orchestrator.sim.version import sim_version

STAGE = "held out"


@dataclass(frozen=True)
class Prediction:
    """One cell as predicted: ``name`` its folder in the evidence, ``band`` the relative error its stack allows."""

    name: str
    cell_key: str
    gpu: str
    policy: str
    jps: float
    num_kv_blocks: int | None
    band: float
    predicted: dict  # ``CellFacts.as_dict``

    @property
    def jct_mean_s(self) -> float | None:
        return self.predicted.get("jct_mean_s")


def predictions_document(predicted: Sequence[tuple[str, CellSpec, CellFacts]], stack: str, command: str) -> dict:
    """What the predictions file holds: each named cell with its prediction (simulated with the engine stack
    ``stack``) and that stack's band, and the ``command`` that made them."""
    errors = get_stack(stack).errors()
    cells = [Prediction(name, cell.key, cell.gpu, cell.policy, cell.jps, cell.engine_options.num_kv_blocks,
                        errors.cell_band(cell.gpu, cell.policy), facts.as_dict()) for name, cell, facts in predicted]
    return {"command": command, "predicted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "sim_stack": stack, "sim_version": sim_version(stack), "cells": [vars(prediction) for prediction in cells]}


def read_predictions(path: Path) -> list[Prediction]:
    """The predictions in ``path``; raises ``ValueError`` (one line) for a file that is not one."""
    try:
        document = json.loads(path.read_text())
        return [Prediction(**cell) for cell in document["cells"]]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"--predictions {path}: not a predictions file written by --predict-only ({error})") from None


def check_predicts(predictions: Sequence[Prediction], named: Sequence[tuple[str, CellSpec]], path: Path) -> None:
    """Raises ``ValueError`` (one line) unless ``predictions`` predict exactly the cells ``named`` (names and keys):
    a run measures what was predicted, or the prediction tests nothing."""
    predicted = {prediction.name: prediction.cell_key for prediction in predictions}
    planned = {name: cell.key for name, cell in named}
    if predicted != planned:
        differ = sorted(name for name in predicted.keys() | planned.keys() if predicted.get(name) != planned.get(name))
        raise ValueError(f"--predictions {path} predicts other cells than this command runs ({', '.join(differ)}); "
                         "valid: the file --predict-only wrote for the same command")  # fmt: skip


def held_out_stage(predictions: Sequence[Prediction], measured: dict[str, float | None]) -> StageResult:
    """Each measured cell (``measured``: mean JCT by name; None where it did not finish) beside its prediction."""
    rows = [_row(prediction, measured[prediction.name]) for prediction in predictions if prediction.name in measured]
    judged = [row for row in rows if row["within_band"] is not None]
    inside = sum(row["within_band"] for row in judged)
    lines = ["| cell | predicted mean JCT (band) | measured | error | within |", "|---|---|---|---|---|"]
    lines += [f"| {row['name']} | {seconds(row['predicted_s'])} (±{row['band']:.0%}) | {seconds(row['measured_s'])} | "
              + ("-" if row["error"] is None else f"{row['error']:+.1%}")
              + f" | {'-' if row['within_band'] is None else 'yes' if row['within_band'] else 'no'} |" for row in rows]
    errors = [abs(row["error"]) for row in judged]
    detail = (f"{inside} of {len(judged)} measured cells within their band; median |error| "
              f"{statistics.median(errors):.1%}, worst {max(errors):.1%}" if judged
              else "no predicted cell was measured")  # fmt: skip
    return StageResult(STAGE, "done", 0.0, detail, "\n".join(lines), {"cells": rows})


def _row(prediction: Prediction, measured_s: float | None) -> dict:
    """The error is the prediction's over the measurement, in parts of the measurement."""
    predicted_s = prediction.jct_mean_s
    judged = measured_s is not None and predicted_s is not None and measured_s > 0
    error = predicted_s / measured_s - 1 if judged else None
    return {"name": prediction.name, "policy": prediction.policy, "jps": prediction.jps, "predicted_s": predicted_s,
            "measured_s": measured_s, "band": prediction.band, "error": error if judged else None,
            "within_band": abs(error) <= prediction.band if judged else None}  # fmt: skip


def predictions_markdown(document: dict) -> str:
    """The predictions as a page to commit beside the file."""
    lines = [f"# Predicted before the GPU ran them ({document['sim_stack']})", "",
             f"Written at {document['predicted_at']} by `{document['command']}` (simulator: {document['sim_version']}). "
             "Each cell, named by its folder in the evidence, is measured by the same command with `--predictions` in "
             "place of `--predict-only`, which ends with each cell beside its prediction and band.", "",
             "| cell | GPU | policy | JPS | KV blocks | mean JCT (band) | p90 JCT | GPU prefix share | preemptions |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for cell in document["cells"]:
        facts = CellFacts.of_dict(cell["predicted"])
        lines.append(f"| {cell['name']} | {cell['gpu']} | {cell['policy']} | {cell['jps']:g} | "
                     f"{cell['num_kv_blocks'] or 'auto'} | {seconds(facts.jct_mean_s)} (±{cell['band']:.0%}) | "
                     f"{seconds(facts.jct_p90_s)} | {facts.gpu_hit_share or 0:.0%} | {facts.preemptions} |")  # fmt: skip
    return "\n".join(lines) + "\n"
