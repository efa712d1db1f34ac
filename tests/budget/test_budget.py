"""The budget, the cost model, the order of measurement and the plan (pure)."""

from __future__ import annotations

import math

import pytest

from orchestrator.budget.cost import CostModel, StartTimes
from orchestrator.budget.gpu_budget import GpuBudget
from orchestrator.budget.plan import plan_cells
from orchestrator.budget.priority import Reason, rank_cells
from orchestrator.budget.spend import OVERRUN_LIMIT, Spending
from orchestrator.cell.spec import EngineKind
from orchestrator.inputs.validation import InputError
from orchestrator.records.prediction import Prediction
from orchestrator.records.verdict import TOO_CLOSE, Verdict, VerdictKind
from orchestrator.sim.error_bands import SimErrors
from orchestrator.sizing.kv import Regime
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.workload.spec import WorkloadSpec

STARTS = {"H100": StartTimes(first_s=100.0, later_s=60.0, tier_extra_s=40.0, reset_s=10.0),
          "H200": StartTimes(first_s=90.0, later_s=50.0, reset_s=10.0)}  # fmt: skip


def test_a_budget_is_for_all_types_per_type_or_both_and_bad_input_names_the_part():
    assert GpuBudget.parse("2h") == GpuBudget(7200.0, {})
    assert GpuBudget.parse("H100=2h, H200=30m") == GpuBudget(None, {"H100": 7200.0, "H200": 1800.0})
    budget = GpuBudget.parse("3h,cpu=90s")
    assert budget == GpuBudget(10800.0, {"cpu": 90.0}) and str(budget) == "3h,cpu=1.5m"
    assert GpuBudget.parse("H100=1h").measures("H100") and not GpuBudget.parse("H100=1h").measures("H200")
    for text, named in [("2 hours", "'2 hours'"), ("H100=0m", "'H100=0m'"), ("X9=1h", "unknown GPU type 'X9'"),
                        ("1h,2h", "two times"), ("H100=1h,H100=2h", "names H100 twice"), (",", "empty")]:  # fmt: skip
        with pytest.raises(InputError, match=named):
            GpuBudget.parse(text)
    with pytest.raises(InputError, match="names H200, which is not among the sweep's GPU types"):
        GpuBudget.parse("H200=1h").check_types(("H100",))


def test_a_start_is_the_shipped_measurement_until_the_run_measures_one_then_the_latest_with_a_fifth_more():
    costs = CostModel(STARTS)
    assert costs.start_s("H100", tiered=False) == 100.0  # the first: nothing started there yet
    assert costs.start_s("A100", tiered=False) == 100.0  # unmeasured: the slowest GPU row
    costs.mark_started("H100")
    assert costs.start_s("H100", tiered=False) == 60.0
    assert costs.start_s("H100", tiered=True) == 100.0  # a CPU tier's allocation on top
    costs.record_start("H100", False, 50.0)
    assert costs.start_s("H100", tiered=False) == pytest.approx(60.0)
    assert costs.start_s("H100", tiered=True) == pytest.approx(100.0)
    told = CostModel(STARTS, first_start_s={"H100": 70.0})
    assert told.start_s("H100", tiered=False) == 70.0


def test_a_cells_load_is_its_predicted_span_scaled_by_what_its_place_measured():
    costs = CostModel(STARTS)
    workload = WorkloadSpec(jps=1, duration_s=10)  # 8 turns with 0.5 s tool calls
    assert costs.load_s("H100", workload, "gpu", None) == 10 + 8 * 1.5  # no prediction: a generous turn per turn
    assert costs.load_s("H100", workload, "gpu", 30.0) == 30.0
    costs.record_load("H100", 45.0, 30.0)
    assert costs.load_s("H100", workload, "gpu", 20.0) == pytest.approx(30.0)
    assert costs.load_s("H200", workload, "gpu", 20.0) == 20.0  # another place learned nothing
    assert costs.cell_s("H200", workload, "gpu", 20.0, tiered=False, needs_start=True) == 90 + 20 + 10


def _verdict(jps: float, kind: VerdictKind, leader: str, margin: tuple[float, float, float], note: str = "") -> Verdict:
    return Verdict(gpu="H100", dram_gb=64.0, jps=jps, engine="sim", kind=kind, leader=leader,
                   tied_with=("continuum", "fcfs") if kind is VerdictKind.TIE else (), margin_pct=margin[0],
                   margin_lo_pct=margin[1], margin_hi_pct=margin[2], num_trials=1, note=note,
                   within_sim_error=note.startswith(TOO_CLOSE))  # fmt: skip


def _cells(jps=(1, 2, 4, 8, 16)):
    spec = SweepSpec(name="order", engine=EngineKind.VLLM, gpus=("H100",), policies=("fcfs", "continuum"), jps=jps,
                     dram_gb=(64,), model="llama-3.1-8b-instruct")  # fmt: skip
    return expand(spec)


def test_cells_the_simulator_cannot_call_come_first_then_those_next_to_a_flip_then_the_tier_then_the_clear():
    cells = _cells()
    errors = SimErrors({"fcfs": 0.05, "continuum": 0.05}, {"H100": 0.0})  # a band of 7.1%
    predicted = [_verdict(1, VerdictKind.TIE, "fcfs", (0.1, -0.5, 0.6)),
                 _verdict(2, VerdictKind.TIE, "fcfs", (0.2, -0.5, 0.8)),
                 _verdict(4, VerdictKind.TIE, "continuum", (5.0, 3.0, 7.0), TOO_CLOSE),
                 _verdict(8, VerdictKind.WIN, "continuum", (40.0, 35.0, 45.0)),
                 _verdict(16, VerdictKind.WIN, "continuum", (80.0, 75.0, 85.0))]  # fmt: skip
    regimes = {cell.key: Regime.OFFLOAD_WINDOW if cell.jps == 1 else None for cell in cells}
    ranked = rank_cells(cells, predicted, errors, regimes)
    assert [(r.cell.jps, r.reason) for r in ranked[:2]] == [(4, Reason.NOT_CALLED)] * 2
    assert "within the 7.1% band" in ranked[0].why
    # 4 -> 8 is a change of verdict (tie to continuum): 8 sits next to it; the loads either side of it are clear.
    assert {(r.cell.jps, r.reason) for r in ranked[2:4]} == {(8, Reason.NEXT_TO_FLIP)}
    # fcfs has no CPU tier: jps 1's regime does not make its comparison one where the tier serves.
    assert all(r.reason is Reason.CLEAR for r in ranked[4:])
    clear = [r for r in ranked if r.reason is Reason.CLEAR]
    # Nearest the band first: jps 2's tie reaches 0.8% (closer to the 7.1% band than jps 1's 0.6%), then the win.
    assert [r.cell.jps for r in clear] == [2, 2, 1, 1, 16, 16]


def test_the_plan_stops_a_type_at_its_first_cell_that_does_not_fit_and_counts_a_start_per_server():
    cells = _cells(jps=(1, 2, 4))
    ranked = rank_cells(cells, [], SimErrors({}, {}), {})  # no predictions: every cell not called, grid order
    predictions = {cell.key: Prediction(cell.key, "twin", 10.0, 0.1, 50.0, 100.0, "v") for cell in cells}
    budget = GpuBudget(None, {"H100": 100 + 60 + 3 * 60 + 10})  # a cold start, a warm one, three loads with resets
    planned = plan_cells(ranked, Spending(budget, CostModel(STARTS), predictions, clock=lambda: 0.0), {"H100": 1})
    # fcfs, continuum | continuum, fcfs | fcfs, continuum: a comparison begins on the server the last one ended on.
    assert [p.needs_start for p in planned] == [True, True, False, True, False, True]
    assert [p.fits for p in planned] == [True, True, True, False, False, False]
    assert [p.estimate_s for p in planned[:4]] == [160.0, 120.0, 60.0, 120.0]
    assert math.isclose(planned[2].left_after_s, 350 - 340)


def test_a_running_cell_counts_at_its_estimate_or_what_it_has_run_and_a_refusal_may_wait_for_it():
    first, second = _cells(jps=(1, 2))[:2]
    predictions = {cell.key: Prediction(cell.key, "twin", 10.0, 0.1, 50.0, 100.0, "v") for cell in (first, second)}
    now = [0.0]
    spending = Spending(GpuBudget(None, {"H100": 300.0}), CostModel(STARTS), predictions, clock=lambda: now[0])
    assert spending.refusal(first, needs_start=True) is None  # 160 s of 300
    spending.begin(first, needs_start=True)
    assert spending.left_s("H100") == 140.0
    now[0] = 200.0  # it runs past its estimate: what it has run counts
    assert spending.left_s("H100") == 100.0
    assert spending.refusal(second, needs_start=False) is None  # 60 s
    now[0] = 260.0
    assert "needs about 60 s, 40 s of the budget left" in spending.refusal(second, needs_start=False)
    assert spending.waiting_may_help("H100")  # the first may end: what is left is then known
    spending.end(first, 260.0, start_s=90.0, done=True)
    assert spending.spent_s == {"H100": 260.0} and not spending.waiting_may_help("H100")
    # Its place learned: the first cell's load took 160 s where 50 were predicted, so the next 50 s takes 160, and a reset.
    assert spending.estimate_s(second, needs_start=False) == pytest.approx(160.0 + 10.0)


def test_under_a_budget_for_all_a_type_that_runs_out_stops_alone_and_a_type_not_named_gets_no_time():
    spec = SweepSpec(name="two", engine=EngineKind.VLLM, gpus=("H100", "H200"), policies=("fcfs",), jps=(1, 2),
                     dram_gb=(64,), model="llama-3.1-8b-instruct")  # fmt: skip
    cells = expand(spec)
    predictions = {cell.key: Prediction(cell.key, "twin", 10.0, 0.1, 50.0 if cell.gpu == "H200" else 400.0, 100.0, "v")
                   for cell in cells}  # fmt: skip
    ranked = rank_cells(cells, [], SimErrors({}, {}), {})
    planned = plan_cells(ranked, Spending(GpuBudget(700.0, {}), CostModel(STARTS), predictions, clock=lambda: 0.0),
                         {"H100": 1, "H200": 1})  # fmt: skip
    fits = {(p.gpu, p.label.split("jps=")[1].split()[0]): p.fits for p in planned}
    # H100: 510 s, then 410 s more does not fit the 190 s left and H100 stops; H200's first cell (150 s) still fits,
    # its second (60 s) not the 40 s left.
    assert fits == {("H100", "1"): True, ("H100", "2"): False, ("H200", "1"): True, ("H200", "2"): False}
    named = plan_cells(ranked, Spending(GpuBudget(None, {"H200": 700.0}), CostModel(STARTS), predictions,
                                        clock=lambda: 0.0), {"H100": 1, "H200": 1})  # fmt: skip
    assert [p.fits for p in named if p.gpu == "H100"] == [False, False]
    assert [p.fits for p in named if p.gpu == "H200"] == [True, True]


def test_a_comparisons_cells_run_together_each_beginning_on_the_server_the_one_before_ended_on():
    cells = _cells(jps=(3, 6, 10))
    errors = SimErrors({"fcfs": 0.05, "continuum": 0.05}, {"H100": 0.0})  # a band of 7.1%
    predicted = [_verdict(3, VerdictKind.WIN, "continuum", (40.0, 35.0, 45.0)),  # 3.9 bands beyond
                 _verdict(6, VerdictKind.WIN, "continuum", (20.0, 15.0, 25.0)),  # 1.1 bands beyond: nearest
                 _verdict(10, VerdictKind.WIN, "continuum", (40.0, 35.0, 45.0))]  # fmt: skip
    ranked = rank_cells(cells, predicted, errors, {})
    assert [(r.cell.jps, r.cell.policy) for r in ranked] == [
        (6, "fcfs"), (6, "continuum"), (3, "continuum"), (3, "fcfs"), (10, "fcfs"), (10, "continuum")]
    # On one slot: a start per comparison and the first, not one per cell; a budget of three cells buys a comparison.
    predictions = {cell.key: Prediction(cell.key, "twin", 10.0, 0.1, 50.0, 100.0, "v") for cell in cells}
    planned = plan_cells(ranked, Spending(GpuBudget(None, {"H100": 1e6}), CostModel(STARTS), predictions,
                                          clock=lambda: 0.0), {"H100": 1})  # fmt: skip
    assert sum(p.needs_start for p in planned) == 4


def test_a_tie_is_called_only_where_its_whole_interval_lies_inside_the_band():
    cells = _cells(jps=(1, 2))
    errors = SimErrors({"fcfs": 0.0, "continuum": 0.0}, {"H100": 0.244})  # a band of 24.4%
    predicted = [_verdict(1, VerdictKind.TIE, "fcfs", (0.5, -3.0, 60.0)),
                 _verdict(2, VerdictKind.TIE, "fcfs", (0.5, -3.0, 4.0))]  # fmt: skip
    reasons = {r.cell.jps: (r.reason, r.why, r.distance) for r in rank_cells(cells, predicted, errors, {})}
    assert reasons[1] == (Reason.NOT_CALLED, "predicted " + predicted[0].in_words() + ": a tie whose interval "
                          "[-3.0, 60.0] reaches past the 24.4% band", 0.0)  # fmt: skip
    assert reasons[2][0] is Reason.CLEAR and reasons[2][2] == pytest.approx((24.4 - 4.0) / 24.4)


def test_a_cold_start_and_a_warm_one_are_learned_apart_and_each_slots_first_start_is_cold():
    costs = CostModel(STARTS)
    costs.record_start("H100", False, 55.0, cold=False)
    assert costs.start_s("H100", tiered=False, cold=False) == pytest.approx(66.0)
    assert costs.start_s("H100", tiered=False, cold=True) == 100.0  # a fresh node's: the shipped first start
    costs.record_start("H100", False, 130.0, cold=True)
    assert costs.start_s("H100", tiered=False, cold=True) == pytest.approx(156.0)
    assert costs.start_s("H100", tiered=False, cold=False) == pytest.approx(66.0)
    # The plan on two slots: each slot's first start is cold, then each serves on.
    cells = _cells(jps=(1, 2))
    predictions = {cell.key: Prediction(cell.key, "twin", 10.0, 0.1, 50.0, 100.0, "v") for cell in cells}
    planned = plan_cells(rank_cells(cells, [], SimErrors({}, {}), {}), Spending(
        GpuBudget(None, {"H100": 1e6}), CostModel(STARTS), predictions, clock=lambda: 0.0), {"H100": 2})  # fmt: skip
    assert [(p.needs_start, p.estimate_s) for p in planned] == [(True, 160.0), (True, 160.0), (False, 60.0),
                                                                (False, 60.0)]  # fmt: skip


def test_a_cell_past_its_allowance_is_over_and_charged_what_it_ran_which_teaches_its_place_a_longer_load():
    first, second = _cells(jps=(1, 2))[:2]
    predictions = {cell.key: Prediction(cell.key, "twin", 10.0, 0.1, 50.0, 100.0, "v") for cell in (first, second)}
    now = [0.0]
    spending = Spending(GpuBudget(None, {"H100": 300.0}), CostModel(STARTS), predictions, clock=lambda: now[0])
    spending.begin(first, needs_start=True, cold=True)  # 160 s: a cold start, a load of 50 s, a reset
    now[0] = OVERRUN_LIMIT * 160.0
    assert spending.overrun(now[0]) == []
    now[0] += 1.0
    assert spending.overrun(now[0]) == [first.key]
    assert spending.estimate_s(second, needs_start=False) == 60.0
    spending.end(first, now[0], start_s=None, done=False, cut_short=True)
    assert spending.spent_s == {"H100": 321.0} and spending.overrun(now[0]) == []
    # Its load was at least 321 - 100 s (its start, as estimated) where 50 were predicted: the next 50 s takes 221.
    assert spending.estimate_s(second, needs_start=False) == pytest.approx(221.0 + 10.0)


def test_cells_that_each_run_to_their_allowance_spend_at_most_the_bound():
    cells = _cells(jps=(1, 2, 4, 8))
    predictions = {cell.key: Prediction(cell.key, "twin", 10.0, 0.1, 50.0, 100.0, "v") for cell in cells}
    now, tick, budget = [0.0], 1.0, 400.0
    spending = Spending(GpuBudget(None, {"H100": budget}), CostModel(STARTS), predictions, clock=lambda: now[0])
    queue, running, at_last_start = list(cells), {}, 0.0
    while queue or running:  # as the driver: in order, on as many slots as it takes; every cell runs until stopped
        while queue and spending.refusal(queue[0], needs_start=not running, cold=not running) is None:
            cell = queue.pop(0)
            spending.begin(cell, needs_start=not running, cold=not running)  # the first starts a server
            running[cell.key] = cell
            at_last_start = sum(c.estimate_s * c.gpus for c in spending.running.values())
        if queue and not spending.waiting_may_help("H100"):
            break
        now[0] += tick
        for key in spending.overrun(now[0]):
            spending.end(running.pop(key), now[0], None, done=False, cut_short=True)
    spent = sum(spending.spent_s.values())
    assert spending.measured == {"H100": 5}  # 160 s, then 60 s each; later the first's overrun leaves no room
    late = 5 * tick  # each stop comes at the first look past its allowance
    assert budget < spent <= budget + (OVERRUN_LIMIT - 1) * at_last_start + late <= OVERRUN_LIMIT * budget + late
