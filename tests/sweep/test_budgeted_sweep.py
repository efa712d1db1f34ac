"""A sweep on a GPU budget, on the fake GPU cluster: every cell predicted before the first is measured, the cells
measured in the plan's order and no others, within the budget, and a second run completing the grid with nothing run
twice; a cell that runs past its allowance stopped and left for a later run. The fake engine stands in for the GPU
engine (it serves no model; its server starts in about the time the start table says). And the starts earlier runs
measured, read back cold or warm (pure)."""

import pandas as pd
import pytest

from orchestrator.budget.cost import CostModel, StartTimes
from orchestrator.budget.gpu_budget import GpuBudget
from orchestrator.budget.spend import OVERRUN_LIMIT, Spending
from orchestrator.records.cell import CellStatus
from orchestrator.records.layout import SweepFiles
from orchestrator.records.prediction import Prediction, read_predictions
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.runtime.budgeted import _costs_so_far, run_budgeted_sweep
from orchestrator.sweep.runtime.driver import run_sweep
from orchestrator.sweep.runtime.queue import MeasuringOrder
from tests.sweep.conftest import fake_spec, options, runs_by_key, summary

SPEC = fake_spec("budgeted", gpus=("H100",), policies=("fcfs", "continuum"), jps=(1, 2, 3), dram_gb=(1,))


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
    # The bound a budget keeps at any pace (budget/spend.py): a cell still running at the last start may run to its
    # allowance, OVERRUN_LIMIT times its estimate, and each began within the budget.
    assert measured.wall_s.sum() <= third.by_type["H100"] * OVERRUN_LIMIT
    assert (measured.sim_error_pct.notna() & measured.predicted_jct_mean_s.notna()).all()
    made = {key: prediction.predicted_unix for key, prediction in predictions.items()}
    assert all(made[key] < started for key, started in zip(measured.cell_key, measured.started_unix)), \
        "a measured cell is not held out: its prediction was not made before it started"
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


def test_a_cell_past_its_allowance_is_stopped_charged_and_left_for_a_later_run(fake_gpu_nodes, tmp_path, capsys):
    spec = fake_spec("overrun", gpus=("H100",), policies=("fcfs",), jps=(1,), dram_gb=(1,))
    budget = GpuBudget(by_type={"H100": 600.0})
    (cell,) = expand(spec)
    # Estimated at a millisecond: any attempt runs past twice that before the driver's first look.
    instant = CostModel({"fake": StartTimes(first_s=0.0, later_s=0.0, reset_s=0.0)})
    spending = Spending(budget, instant, {cell.key: Prediction(cell.key, "twin", 1.0, 0.1, 0.001, 100.0, "v")})
    order = MeasuringOrder({cell.key: 0}, spending)
    assert run_sweep(spec, options(tmp_path, gpu_budget=budget, report=False), measuring=order) == 0
    (row,) = summary(tmp_path, "overrun").to_dict("records")
    assert row["status"] == "pending" and row["reason"].startswith("left for later: stopped after")
    (attempt,) = runs_by_key(tmp_path, "overrun")[cell.key]
    assert attempt.status is CellStatus.INTERRUPTED
    assert spending.measured == {"H100": 1} and spending.spent_s["H100"] > 0 and not spending.running
    assert order.nodes_started == {fake_gpu_nodes["H100"]}  # its start was the node's first: cold
    budget_line = next(line for line in capsys.readouterr().out.splitlines() if "--gpu-budget" in line)
    assert "past their allowance (2 x the estimate), interrupted and left for later: 1 cells" in budget_line


def test_earlier_runs_starts_are_read_back_each_nodes_first_cold_and_the_later_warm(tmp_path):
    files = SweepFiles(tmp_path)
    rows = [("a", 1.0, 130.0), ("a", 2.0, 50.0), ("b", 3.0, 120.0)]  # node, finished_unix, replica_start_s
    pd.DataFrame([{"cell_key": f"k{index}", "engine": "vllm", "gpu": "H100", "policy": "fcfs", "dram_gb": 64.0,
                   "status": "done", "node_id": node, "finished_unix": finished, "replica_start_s": start}
                  for index, (node, finished, start) in enumerate(rows)]).to_parquet(files.summary)  # fmt: skip
    costs = _costs_so_far(files)
    assert costs.start_s("H100", tiered=False, cold=True) == pytest.approx(120.0 * 1.2)  # node b's, the latest cold
    assert costs.start_s("H100", tiered=False, cold=False) == pytest.approx(50.0 * 1.2)


def test_a_start_is_read_back_as_what_its_cell_spent_before_its_load_where_the_worker_said(tmp_path):
    """A worker's first cell spends more before its load than its server's start (its checks, model and plan): the
    budget learns that, so that a later run's first cell is not stopped past twice an estimate that left it out. An
    older row with no setup falls back to the start."""
    files = SweepFiles(tmp_path)
    rows = [("a", 1.0, 1.0, 4.0), ("a", 2.0, 1.0, None)]  # node, finished_unix, replica_start_s, setup_s
    frame = pd.DataFrame([{"cell_key": f"k{index}", "engine": "fake", "gpu": "H100", "policy": "fcfs", "dram_gb": 1.0,
                           "status": "done", "node_id": node, "finished_unix": finished, "replica_start_s": start,
                           "setup_s": setup} for index, (node, finished, start, setup) in enumerate(rows)])  # fmt: skip
    frame.to_parquet(files.summary)
    costs = _costs_so_far(files)
    assert costs.start_s("fake", tiered=False, cold=True) == pytest.approx(4.0 * 1.2)
    assert costs.start_s("fake", tiered=False, cold=False) == pytest.approx(1.0 * 1.2)
