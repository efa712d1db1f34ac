"""Refit a GPU type's rates from a budgeted sweep's measured cells, and re-predict the sweep's cells with them, the
error before and after shown. Nothing is written to the project's calibration: the refit rates live in this run only,
and the table goes to the sweep's directory.

    python -m orchestrator.cli.refit DIR/<sweep> --gpu H100       (kvsweep refit DIR/<sweep> --gpu H100)

The measured cells' scheduler traces are fitted as ``python -m orchestrator.sim.gpu_profile`` fits them (the
roofline the simulator steps by). Every predicted cell of the type is then simulated again, on its own schedule, with
the fitted rates. Over the measured cells the error after is in-sample (the fit saw their steps); over the cells still
predicted it is the change of their predictions that a user weighs. Making the rates the project's is a separate,
explicit step: ``python -m orchestrator.sim.gpu_profile --gpu H100 TRACES --write``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from orchestrator.cell.cell_json import read_cell_json
from orchestrator.cell.spec import CellSpec
from orchestrator.gpus import GPU_TYPES
from orchestrator.inputs.parser import command_parser
from orchestrator.inputs.validation import InputError
from orchestrator.models.arch import load_model
from orchestrator.records.cell import CellStatus
from orchestrator.records.layout import SweepFiles
from orchestrator.records.names import read_summary
from orchestrator.records.prediction import relative_error_pct
from orchestrator.records.store import atomic_write_csv
from orchestrator.records.summary import summarize
from orchestrator.roofline.hardware import Device
from orchestrator.roofline.rates import GpuRates
from orchestrator.sim.cell_engine import cell_sim_engine
from orchestrator.sim.gpu_profile import MeasuredProfile, measure_profile, trace_steps
from orchestrator.sim.loop import Replicas, simulate
from orchestrator.sim.stacks import stack_calibration
from orchestrator.workload.schedule import schedule_for

MIN_STEPS = 20  # a profile fitted from fewer busy steps is noise
REFIT_FILE = "refit-{gpu}.csv"


def refit(sweep_dir: Path, gpu: str) -> tuple[MeasuredProfile, pd.DataFrame]:
    """``gpu``'s profile from the sweep's measured cells, and per predicted cell of that type its prediction before
    and after the refit beside its measurement (where it has one)."""
    files = SweepFiles(sweep_dir)
    if not files.predictions.exists():
        raise InputError(f"{sweep_dir} has no {files.predictions.name}: refit re-predicts a budgeted sweep's cells "
                         "(--gpu-budget); valid: the directory of such a sweep")  # fmt: skip
    predictions = pd.read_csv(files.predictions)
    predictions = predictions[predictions.gpu == gpu]
    summary = read_summary(files.summary)
    measured = summary[(summary.engine != "sim") & (summary.status == CellStatus.DONE.value) & (summary.gpu == gpu)]
    traces = [files.cell(key).scheduler_trace for key in measured.cell_key if files.cell(key).scheduler_trace.exists()]
    if not traces:
        types = sorted(set(summary[summary.engine != "sim"].gpu) & set(GPU_TYPES))
        raise InputError(f"no measured {gpu} cell with a scheduler trace in {sweep_dir}; valid: --gpu a GPU type "
                         f"measured there ({', '.join(types) or 'none'})")  # fmt: skip
    if not len(predictions):
        raise InputError(f"{files.predictions} predicts no {gpu} cell; valid: --gpu a type the sweep predicted "
                         f"({', '.join(sorted(set(pd.read_csv(files.predictions).gpu) & set(GPU_TYPES))) or 'none'})")  # fmt: skip
    twins = {row.cell_key: _cell(files, row.twin_key) for row in predictions.itertuples()}
    steps = pd.concat([trace_steps(path) for path in traces], ignore_index=True)
    cells = [(row.cell_key, row.label, twins[row.cell_key], row.jct_mean_s) for row in predictions.itertuples()]
    profile, table = repredict(gpu, steps, cells, dict(zip(measured.cell_key, measured.jct_censored_mean_s)),
                               f"{len(traces)} cells of {sweep_dir.name}")  # fmt: skip
    atomic_write_csv(table, sweep_dir / REFIT_FILE.format(gpu=gpu))
    return profile, table


def repredict(gpu: str, steps: pd.DataFrame, cells: list[tuple[str, str, CellSpec, float]],
              measured_jct_s: dict[str, float], source: str) -> tuple[MeasuredProfile, pd.DataFrame]:  # fmt: skip
    """``gpu``'s profile fitted from ``steps`` (``profile.step_samples`` rows), and each of ``cells`` (its key, label,
    simulated twin and prediction before) simulated again with it, beside its measured mean job time where it has
    one."""
    if len(steps) < MIN_STEPS:
        raise InputError(f"{len(steps)} busy steps of {gpu}; a refit needs {MIN_STEPS}")
    profile = measure_profile(gpu, steps, load_model(cells[0][2].model), source)
    device = replace(Device.gpu(gpu), relative=GpuRates.load().with_measured(
        gpu, profile.profile.rates(), profile.source).relative(gpu))  # fmt: skip
    rows = []
    for key, label, twin, before in cells:
        after, measured = _predicted_jct_s(twin, device), measured_jct_s.get(key)
        rows.append({"cell_key": key, "label": label, "measured": measured is not None, "predicted_before_s": before,
                     "predicted_after_s": after, "measured_s": measured, "error_before_pct": relative_error_pct(before, measured),
                     "error_after_pct": relative_error_pct(after, measured)})  # fmt: skip
    return profile, pd.DataFrame(rows)


def summary_lines(gpu: str, profile: MeasuredProfile, table: pd.DataFrame) -> list[str]:
    measured, predicted = table[table.measured], table[~table.measured]
    change = (predicted.predicted_after_s / predicted.predicted_before_s - 1) * 100
    return [
        f"{gpu}: rates refit from {profile.profile.num_steps} busy steps of the measured cells:",
        profile.describe(),
        f"mean job time over the {len(measured)} measured cells, RMS error {_rms(measured.error_before_pct):.1f}% "
        f"before, {_rms(measured.error_after_pct):.1f}% after (in-sample: the fit saw their steps)",
        f"the {len(predicted)} cells still predicted move by {change.abs().mean():.1f}% on average "
        f"(largest {change.abs().max():.1f}%)" if len(predicted) else "no cell of the type is still only predicted",
        "the project's rates are unchanged; to make these its own: python -m orchestrator.sim.gpu_profile "
        f"--gpu {gpu} TRACES --write",
    ]  # fmt: skip


def _cell(files: SweepFiles, key: str) -> CellSpec:
    return read_cell_json(files.cell(key).config).cell


def _predicted_jct_s(twin: CellSpec, device: Device) -> float:
    engine = cell_sim_engine(twin.engine_setup, twin.workload, twin.cpu_profile, device,
                             stack_calibration(twin.sim_stack))  # fmt: skip
    result = simulate(twin.workload, engine, schedule_for(twin.workload), Replicas(twin.replicas, twin.router, seed=twin.seed))
    return summarize(result.requests, result.jobs).jct_censored_mean_s


def _rms(errors: pd.Series) -> float:
    return float(np.sqrt((errors.dropna() ** 2).mean())) if errors.notna().any() else float("nan")


def parser() -> argparse.ArgumentParser:
    p = command_parser("refit", __doc__)
    p.add_argument("sweep_dir", type=Path, help="a budgeted sweep's directory (DIR/<sweep>)")
    p.add_argument("--gpu", required=True, help=f"the GPU type to refit: {', '.join(GPU_TYPES)}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.gpu not in GPU_TYPES:
            raise InputError(f"--gpu {args.gpu!r}: the simulator's rates are per GPU type; valid: {', '.join(GPU_TYPES)}")
        if not (args.sweep_dir / "summary.parquet").exists():
            raise InputError(f"{args.sweep_dir}: no summary.parquet; valid: a sweep's directory (DIR/<sweep>)")
        profile, table = refit(args.sweep_dir, args.gpu)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(args.gpu, profile, table)))
    print(f"per cell: {args.sweep_dir / REFIT_FILE.format(gpu=args.gpu)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
