"""Cells predicted before a GPU runs them: ``--predict-only`` writes every GPU cell the same command runs, named by
its folder in the evidence, with its key, prediction and band, and runs nothing; a run given ``--predictions`` for
other cells is refused before anything starts; the run's last stage sets each measured cell beside its prediction."""

from __future__ import annotations

import json

import pytest

from orchestrator.cli.evidence import main, parser, plan_from
from orchestrator.evidence.held_out import Prediction, held_out_stage, read_predictions
from orchestrator.sim.stacks import DEFAULT_STACK, get_stack

FLAGS = ["--gpu", "H100", "--budget-s", "500", "--stages", "doctor,cells,capacity", "--policies", "fcfs,continuum",
         "--jps", "1.8", "--kv-blocks", "3000", "--duration-s", "4", "--capacity-cells", "fcfs:2",
         "--pressure-window-s", "30"]  # fmt: skip


@pytest.fixture(scope="module")
def predicted(tmp_path_factory) -> tuple[dict, list]:
    out = tmp_path_factory.mktemp("held-out")
    assert main([*FLAGS, "--out", str(out / "evidence"), "--predict-only", str(out / "predictions.json")]) == 0
    assert not (out / "evidence").exists()  # nothing ran
    assert "| cells/continuum | H100 | continuum | 1.8 | 3000 |" in (out / "predictions.md").read_text()
    return json.loads((out / "predictions.json").read_text()), read_predictions(out / "predictions.json")


def test_every_gpu_cell_of_the_command_is_predicted_under_its_folder_with_its_key_and_band(predicted):
    document, predictions = predicted
    plan = plan_from(parser().parse_args([*FLAGS, "--out", "o"]))
    assert [(p.name, p.cell_key) for p in predictions] == [(name, cell.key) for name, cell in plan.gpu_cells()]
    assert [p.name for p in predictions] == ["cells/fcfs", "cells/continuum", "capacity/fcfs-2jps"]
    assert document["sim_stack"] == DEFAULT_STACK and f"simulator {DEFAULT_STACK}" in document["sim_version"]
    errors = get_stack(DEFAULT_STACK).errors()
    assert all(p.band == errors.cell_band("H100", p.policy) and p.jct_mean_s > 0 for p in predictions)


def test_a_run_given_predictions_of_other_cells_is_refused_before_anything_starts(predicted, tmp_path, capsys):
    _, predictions = predicted
    path = tmp_path / "predictions.json"
    path.write_text(json.dumps({"cells": [vars(p) for p in predictions]}))
    other = [flag if flag != "1.8" else "2.2" for flag in FLAGS]
    assert main([*other, "--out", str(tmp_path / "out"), "--predictions", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --predictions {path} predicts other cells than this command runs (cells/continuum, "
                          "cells/fcfs)") and err.count("\n") == 1  # fmt: skip
    assert not (tmp_path / "out").exists()
    (tmp_path / "noise.json").write_bytes(b"\x00\xff not json")
    assert main([*FLAGS, "--out", str(tmp_path / "out"), "--predictions", str(tmp_path / "noise.json")]) == 2
    assert "not a predictions file written by --predict-only" in capsys.readouterr().err


def test_the_last_stage_sets_each_measured_cell_beside_its_prediction_and_band():
    def prediction(name: str, jct_s: float) -> Prediction:
        return Prediction(name, "k", "H200", "fcfs", 1.8, None, 0.05, {"jct_mean_s": jct_s})

    predictions = [prediction("cells/fcfs", 10.4), prediction("cells/continuum", 12.0), prediction("pressure/fcfs", 9.0),
                   prediction("capacity/fcfs-2jps", 5.0)]  # fmt: skip
    stage = held_out_stage(predictions, {"cells/fcfs": 10.0, "cells/continuum": 10.0, "pressure/fcfs": None})
    rows = {row["name"]: row for row in stage.facts["cells"]}
    assert rows["cells/fcfs"]["error"] == pytest.approx(0.04) and rows["cells/fcfs"]["within_band"] is True
    assert rows["cells/continuum"]["within_band"] is False  # 20% over a 5% band
    assert rows["pressure/fcfs"]["within_band"] is None  # it did not finish: nothing to judge
    assert "capacity/fcfs-2jps" not in rows  # skipped by the budget: not measured
    assert stage.detail == "1 of 2 measured cells within their band; median |error| 12.0%, worst 20.0%"
