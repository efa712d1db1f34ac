"""A sweep on a GPU budget (``--gpu-budget``): predict every cell, measure first the cells whose measurement can
change the answer, stop where the budget ends, and leave the rest for a later run in the same order.

1. Where the sweep measures the CPU engine, its profile first (``runtime.profiling``): the simulator models that
   engine only from it. Its cells are what every prediction of that engine needs, not cells of the grid: they are
   not charged to the budget, and their time is printed.
2. Every real cell's simulated twin (the same cell with ``engine=sim``), run as ordinary cells of the same sweep
   (tracked and kept: a later run predicts nothing again); ``predictions.csv`` written and logged on the sweep's
   MLflow run before any real cell starts.
3. The order (``budget.priority``: from the twins' verdicts, bands included, and the cells' preflight) and the plan
   (``budget.plan``: each cell's estimated cost, and which the budget covers), written as ``budget_plan.csv``; a
   dry run prints it and stops there.
4. The real cells, in that order, each started only where its estimate fits what is left (the driver's
   ``MeasuringOrder``); the run ends with one line saying what it measured and what it left for later, and why.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pandas as pd

from orchestrator.budget.cost import CostModel, start_place, start_spent_s
from orchestrator.budget.plan import plan_cells, plan_frame, plan_lines
from orchestrator.budget.priority import rank_cells
from orchestrator.budget.spend import Spending
from orchestrator.cell.spec import CellSpec, EngineKind
from orchestrator.gpus import CPU
from orchestrator.policies.catalog import get_policy
from orchestrator.records.cell import CellStatus
from orchestrator.records.layout import SweepFiles
from orchestrator.records.names import read_summary
from orchestrator.records.prediction import Prediction, predictions_frame, read_predictions
from orchestrator.records.store import atomic_write_csv
from orchestrator.records.verdict import Verdict
from orchestrator.roofline.hardware import CpuProfile
from orchestrator.sim.error_bands import SimErrors
from orchestrator.sim.stacks import get_stack
from orchestrator.sim.version import sim_version
from orchestrator.sweep.cluster.connect import connect_ray
from orchestrator.sweep.cluster.inventory import Inventory
from orchestrator.sweep.planning.options import SweepOptions
from orchestrator.sweep.planning.preflight import preflight
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.sweep.runtime.driver import (
    EXIT_INTERRUPTED,
    EXIT_STOPPED,
    open_tracker,
    plan_sweep,
    run_sweep,
    slot_gib,
)
from orchestrator.sweep.runtime.profiling import measure_cpu_profile, profile_spec, read_cpu_profile
from orchestrator.sweep.runtime.queue import MeasuringOrder


def run_budgeted_sweep(spec: SweepSpec, options: SweepOptions) -> int:
    """Predict, order, plan, then measure within ``options.gpu_budget`` (with ``dry_run``, print the plan instead)."""
    connect_ray(options.ray_address)
    files = SweepFiles(options.results_dir / spec.name)
    plan = plan_sweep(spec, options)
    real = [cell for cell in plan.cells if cell.engine is not EngineKind.SIM]
    quiet = replace(options, gpu_budget=None, report=False, dry_run=False)
    profile = _cpu_profile(spec, options, quiet) if any(cell.gpu == CPU for cell in real) else None
    predictions: dict[str, Prediction] = {}
    verdicts: list[Verdict] = []
    errors = get_stack(spec.sim_stack).errors()
    if profile is not None or not any(cell.gpu == CPU for cell in real):
        print(f"[{spec.name}] predicting {len(real)} cells in the simulator before any is measured", flush=True)
        twin_spec = spec.model_copy(update={"engine": EngineKind.SIM, "cpu_profile": profile})
        if (code := run_sweep(twin_spec, quiet)) in (EXIT_INTERRUPTED, EXIT_STOPPED):
            return code
        summary = read_summary(files.summary)
        earlier = {} if options.rerun else read_predictions(files.predictions)
        predictions = _predictions(real, summary, profile, spec.sim_stack, errors, earlier)
        verdicts = _predicted_verdicts(summary, files, errors)
        atomic_write_csv(predictions_frame(list(predictions.values()), {c.key: _described(c) for c in real}),
                         files.predictions)  # fmt: skip
        if not options.dry_run:
            open_tracker(spec, options).log_parent_file(files.predictions, "predictions")
    done = frozenset() if options.rerun else _measured_keys(files)  # --rerun measures every cell again
    ranked = rank_cells(real, verdicts, errors, {cell.key: preflight(cell).regime for cell in real})
    costs = _costs_so_far(files)
    still = Spending(options.gpu_budget, costs, predictions, clock=lambda: 0.0)  # a plan runs nothing
    planned = plan_cells(ranked, still, _slots(plan.inventory, real), done)
    atomic_write_csv(plan_frame(planned), files.budget_plan)
    print("\n".join([f"[{spec.name}] the plan ({files.budget_plan}):", *plan_lines(planned, options.gpu_budget, len(done))]),
          flush=True)  # fmt: skip
    if options.dry_run:
        return 0
    rank = {ranked_cell.cell.key: index for index, ranked_cell in enumerate(ranked)}
    # A fresh cost model for the run: the plan's has its planned starts marked as if they had happened.
    spending = Spending(options.gpu_budget, _costs_so_far(files), predictions)
    return run_sweep(spec, options, measuring=MeasuringOrder(rank, spending))


def _cpu_profile(spec: SweepSpec, options: SweepOptions, quiet: SweepOptions) -> CpuProfile | None:
    """The CPU engine's profile on this machine: measured (outside the budget) unless done; in a dry run, only
    read (None where it is not measured yet: the plan then has no predictions)."""
    if options.dry_run:
        try:
            return read_cpu_profile(spec, options.results_dir)
        except (OSError, ValueError):
            print(f"[{spec.name}] dry run: the CPU engine's profile is not measured yet; a run measures its "
                  f"{profile_spec(spec).trials} cells first (outside the budget), then predicts every cell; until then "
                  "the plan below has no predictions", flush=True)  # fmt: skip
            return None
    started = time.monotonic()
    profile = measure_cpu_profile(spec, quiet)
    print(f"[{spec.name}] the CPU engine's profile ({time.monotonic() - started:.0f} s, outside the budget): "
          f"{profile.describe()}", flush=True)  # fmt: skip
    return profile


def twin_of(cell: CellSpec, profile: CpuProfile | None, stack: str) -> CellSpec:
    """The cell the simulator runs to predict ``cell``: the same cell on the simulated engine, the CPU engine's as
    ``profile`` measured it and a GPU type's with the engine stack ``stack`` (a simulated cell is its own twin)."""
    if cell.engine is EngineKind.SIM:
        return cell
    return cell.model_copy(update={"engine": EngineKind.SIM, "cpu_profile": profile if cell.gpu == CPU else None,
                                   "sim_stack": None if cell.gpu == CPU else stack})


def _predictions(real: list[CellSpec], summary: pd.DataFrame, profile: CpuProfile | None, stack: str,
                 errors: SimErrors, earlier: dict[str, Prediction]) -> dict[str, Prediction]:  # fmt: skip
    """Each real cell's prediction from its twin's done row (``twin_of``), its band from ``errors`` (the engine stack
    ``stack``'s), made when that twin ended; one an earlier run made from the same twin is kept as it was (with the
    simulator's version of then; one from a file that did not say when it was made takes its twin's end, which is no
    earlier)."""
    rows = summary[(summary.engine == EngineKind.SIM.value) & (summary.status == CellStatus.DONE.value)]
    by_key = rows.set_index("cell_key")
    version = sim_version(stack)
    predictions = {}
    for cell in real:
        twin = twin_of(cell, profile, stack).key
        if twin not in by_key.index:
            continue
        row = by_key.loc[twin]
        if cell.key in earlier and earlier[cell.key].twin_key == twin:
            kept = earlier[cell.key]
            made = kept.predicted_unix if kept.predicted_unix is not None else _number(row.finished_unix)
            predictions[cell.key] = replace(kept, predicted_unix=made)
            continue
        predictions[cell.key] = Prediction(
            cell_key=cell.key, twin_key=twin, jct_mean_s=float(row.jct_censored_mean_s),
            band=errors.cell_band(cell.gpu, cell.policy), span_s=_number(row.span_s),
            completion_pct=_number(row.completion_pct), sim_version=version, predicted_unix=_number(row.finished_unix),
        )  # fmt: skip
    return predictions


def _predicted_verdicts(summary: pd.DataFrame, files: SweepFiles, errors: SimErrors) -> list[Verdict]:
    """The verdicts of the simulated cells, with the bands ``errors`` (their engine stack's)."""
    from orchestrator.analysis.load import cell_records
    from orchestrator.analysis.verdicts import verdicts

    simulated = summary[summary.engine == EngineKind.SIM.value]
    found, _ = verdicts(simulated, cell_records(files), errors)
    return found


def _measured_keys(files: SweepFiles) -> frozenset[str]:
    if not files.summary.exists():
        return frozenset()
    summary = read_summary(files.summary, columns=["cell_key", "engine", "status"])
    done = summary[(summary.engine != EngineKind.SIM.value) & (summary.status == CellStatus.DONE.value)]
    return frozenset(done.cell_key)


def _costs_so_far(files: SweepFiles) -> CostModel:
    """The cost model, with the server starts the sweep's earlier runs measured (latest last, each as the model counts
    a start: ``start_spent_s``): each node's first start cold, its later ones warm (a row that names no node: cold
    where it is its place's first)."""
    costs = CostModel()
    if not files.summary.exists():
        return costs
    summary = read_summary(files.summary)
    started = summary[(summary.engine != EngineKind.SIM.value) & summary.replica_start_s.notna()]
    nodes_started: set[str] = set()
    for row in started.sort_values("finished_unix").to_dict("records"):
        tiered = get_policy(row["policy"]).tier_gib(row["dram_gb"]) > 0
        node = row.get("node_id") if isinstance(row.get("node_id"), str) else None
        start_s = start_spent_s(row["replica_start_s"], _number(row.get("setup_s")))
        costs.record_start(start_place(row["engine"], row["gpu"]), tiered, start_s,
                           cold=None if node is None else node not in nodes_started)  # fmt: skip
        if node is not None:
            nodes_started.add(node)
    return costs


def _slots(inventory: Inventory, cells: list[CellSpec]) -> dict[str, int]:
    """Per GPU type, the slots its cells run on (one where the cluster has none up yet)."""
    gib = slot_gib(cells)
    return {gpu: len(inventory.slots(gpu, gib[gpu])) if inventory.is_up(gpu) else 1 for gpu in gib}


def _described(cell: CellSpec) -> dict:
    return {"label": cell.label, "gpu": cell.gpu, "policy": cell.policy, "jps": cell.jps, "dram_gb": cell.dram_gb,
            "seed": cell.seed, "replicas": cell.replicas, "router": cell.router.value if cell.router else None,
            "tp": cell.tp}  # fmt: skip


def _number(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)
