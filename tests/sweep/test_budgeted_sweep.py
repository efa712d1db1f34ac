"""A sweep on a GPU budget, on the fake GPU cluster: every cell predicted before the first is measured, the cells
measured in the plan's order and no others, within the budget, and a second run completing the grid with nothing run
twice. The fake engine stands in for the GPU engine (it serves no model; its server starts in about the time the
start table says)."""

import pandas as pd

from orchestrator.records.prediction import read_predictions
from orchestrator.sweep.planning.gpu_budget import GpuBudget
from orchestrator.sweep.runtime.budgeted import run_budgeted_sweep
from tests.sweep.conftest import fake_spec, options, runs_by_key, summary

SPEC = fake_spec("budgeted", gpus=("H100",), policies=("fcfs", "continuum"), jps=(1, 2, 3), dram_gb=(1,))
OVERRUN = 0.10  # of the budget, at most


def test_a_budget_measures_a_prefix_of_its_plan_within_the_budget_and_a_second_run_completes_the_grid(
    fake_gpu_nodes, tmp_path, capsys
):
    whole = GpuBudget(by_type={"H100": 3600.0})
    assert run_budgeted_sweep(SPEC, options(tmp_path, gpu_budget=whole, dry_run=True)) == 0
    plan = pd.read_csv(tmp_path / "budgeted" / "budget_plan.csv")
    assert len(plan) == 6 and plan.fits.all()
    assert "the plan" in capsys.readouterr().out
    third = GpuBudget(by_type={"H100": plan.estimate_s.sum() / 3})

    assert run_budgeted_sweep(SPEC, options(tmp_path, gpu_budget=third, report=False)) == 0
    rows = summary(tmp_path, "budgeted")
    real = rows[rows.engine == "fake"]
    predictions = read_predictions(tmp_path / "budgeted" / "predictions.csv")
    assert set(predictions) == set(real.cell_key)  # every cell predicted, by a done simulated twin
    assert set(rows[(rows.engine == "sim") & (rows.status == "done")].cell_key) == {p.twin_key for p in predictions.values()}
    measured = real[real.status == "done"]
    order = list(plan.cell_key)
    assert 0 < len(measured) < len(order)
    assert set(measured.cell_key) == set(order[: len(measured)]), "measured cells are not the plan's first ones"
    assert measured.wall_s.sum() <= third.by_type["H100"] * (1 + OVERRUN)
    assert (measured.sim_error_pct.notna() & measured.predicted_jct_mean_s.notna()).all()
    left = real[real.status == "pending"]
    assert len(left) == len(order) - len(measured) and left.reason.str.startswith("left for later").all()
    stop_line = [line for line in capsys.readouterr().out.splitlines() if "--gpu-budget" in line][-1]
    assert f"left for later: {len(left)} cells" in stop_line

    rest = GpuBudget(by_type={"H100": plan.estimate_s.sum() * 2})
    assert run_budgeted_sweep(SPEC, options(tmp_path, gpu_budget=rest, report=False)) == 0
    rows = summary(tmp_path, "budgeted")
    assert (rows.status == "done").all()
    runs = runs_by_key(tmp_path, "budgeted")
    assert all(len(attempts) == 1 for attempts in runs.values()), "a cell ran twice"
    assert "nothing left for later" in capsys.readouterr().out
