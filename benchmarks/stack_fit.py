"""The simulator's constants for the engine stack vllm-0.26, fitted on every GPU cell on record, and how well they
predict a GPU run they were not fitted on.

Every measured cell of ``docs/gpu-runs`` (``orchestrator.sim.gpu_cells``) is simulated three ways: with today's
calibration (``calibration.toml``, fitted on the source study's H200 runs of an older vLLM), with the stack fitted on
every cell (in-sample), and with the stack fitted on every run but the cell's own (held out:
``stack_fit.leave_one_run_out``). Printed: each cell's mean JCT and the three errors; per policy and GPU type the
median and worst |error|; each comparison (a policy against fcfs over the same jobs, and native-offload against
lmcache) measured with its interval and simulated each way, and whether the simulator calls it; the constants of the
fit and of each fold; the step-time error before and after; the acceptance; and last one line of JSON. About a minute
and a half on two cores. The stack's file itself is written by ``kvsweep calibrate --stack vllm-0.26 RUN_DIR...``, the
same fit.

    python benchmarks/stack_fit.py [--runs DIR ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from orchestrator.roofline.hardware import Calibration
from orchestrator.sim.gpu_cells import GPU_RUNS_DIR, GpuCell, read_runs, run_dirs
from orchestrator.sim.stack_fit import (
    Comparison,
    Fold,
    comparisons,
    constants,
    error_summary,
    fit_roofline,
    fit_stack,
    leave_one_run_out,
    relative_error,
    roofline_steps,
    held_out,
    simulated_job_times,
    step_errors,
)
from orchestrator.sim.stacks import DEFAULT_STACK as STACK

WAYS = ("today", "in-sample", "held out")
TARGET_MEDIAN, TARGET_WORST, TARGET_MARGIN_POINTS = 0.05, 0.12, 5.0
Times = dict[str, dict[str, pd.Series]]  # per way, each cell's simulated job times by key


def cell_table(cells: Sequence[GpuCell], times: Times) -> str:
    lines = ["| cell | GPU | policy | measured mean JCT | " + " | ".join(WAYS) + " |", "|---|---|---|---|---|---|---|"]
    for cell in cells:
        errors = " | ".join(f"{times[way][cell.key].mean():.2f} s ({relative_error(times[way][cell.key], cell):+.1%})"
                            for way in WAYS)  # fmt: skip
        lines.append(f"| {cell.key} | {cell.gpu} | {cell.policy} | {cell.jct_mean_s:.2f} s | {errors} |")
    return "\n".join(lines)


def summary_table(summaries: dict[str, dict]) -> str:
    lines = ["| policy, GPU | cells | " + " | ".join(f"{way} median / worst" for way in WAYS) + " |",
             "|---|---|---|---|---|"]  # fmt: skip
    for group, row in summaries["today"].items():
        figures = [f"{summaries[way][group]['median']:.1%} / {summaries[way][group]['worst']:.1%}" for way in WAYS]
        lines.append(f"| {group} | {row['cells']} | " + " | ".join(figures) + " |")
    return "\n".join(lines)


def comparison_table(found: Sequence[Comparison], times: Times) -> str:
    lines = ["| call | policy vs rival | measured | " + " | ".join(WAYS) + " |", "|---|---|---|---|---|---|"]
    for comparison in found:
        m = comparison.measured
        said = [f"{comparison.simulated_pct(times[way]):+.1f}% {comparison.simulated_call(times[way])}"
                + ("" if comparison.predicted(times[way]) else " (missed)") for way in WAYS]  # fmt: skip
        pair = f"{comparison.cell.policy} vs {comparison.rival.policy}"
        measured = f"{m.estimate:+.1f}% [{m.lo:+.1f}, {m.hi:+.1f}] {comparison.measured_call}"
        lines.append(f"| {comparison.label} | {pair} | {measured} | " + " | ".join(said) + " |")
    return "\n".join(lines)


def tier_margins(found: Sequence[Comparison], times: Times) -> dict[str, dict[str, float]]:
    """Per GPU type: native-offload's margin over lmcache, measured and simulated each way."""
    return {c.cell.gpu: {"measured": c.measured.estimate} | {way: c.simulated_pct(times[way]) for way in WAYS}
            for c in found if c.rival.policy == "lmcache"}  # fmt: skip


def acceptance(summaries: dict[str, dict], found: Sequence[Comparison], times: Times, margins: dict) -> dict[str, bool]:
    held = summaries["held out"]["all"]
    claims = {f"held-out median |error| <= {TARGET_MEDIAN:.0%}": held["median"] <= TARGET_MEDIAN,
              f"held-out worst |error| <= {TARGET_WORST:.0%}": held["worst"] <= TARGET_WORST}  # fmt: skip
    for way in ("held out", "in-sample"):
        claims[f"every comparison called ({way})"] = all(c.predicted(times[way]) for c in found)
        claims[f"native-offload over lmcache within {TARGET_MARGIN_POINTS:g} points on each GPU type ({way})"] = all(
            abs(row[way] - row["measured"]) <= TARGET_MARGIN_POINTS for row in margins.values())  # fmt: skip
    return claims


def roofline_lines(cells: Sequence[GpuCell], fitted: Calibration) -> list[str]:
    """The step-time error per GPU type before and after, and the roofline fitted on each type's steps alone."""
    steps = roofline_steps(cells)

    def errors(calibration: Calibration) -> str:
        return ", ".join(f"{gpu} {error:.1%}" for gpu, error in step_errors(steps, calibration).items())

    lines = [f"median step-time error over {len(steps):,} busy steps: today {errors(Calibration.load())}; "
             f"fitted {errors(fitted)}"]  # fmt: skip
    for gpu in sorted(set(steps.gpu)):
        own = fit_roofline(steps[steps.gpu == gpu], fitted)
        lines.append(f"fitted on {gpu}'s steps alone: compute {own.compute_efficiency:.3f}, memory "
                     f"{own.hbm_efficiency:.3f}, per step {own.step_overhead_s * 1e3:.3g} ms, per request "
                     f"{own.seq_overhead_s * 1e6:.3g} us (every type's: compute {fitted.compute_efficiency:.3f}, "
                     f"memory {fitted.hbm_efficiency:.3f})")  # fmt: skip
    return lines


def constants_lines(stack: Calibration, folds: Sequence[Fold]) -> list[str]:
    def listed(found: Calibration) -> str:
        return ", ".join(f"{name} {value:.4g}" for name, value in constants(found).items())

    heading = "constants (fitted on every run; then each fold, fitted without the run named):"
    return [heading, f"  all: {listed(stack)}"] + [f"  without {fold.run}: {listed(fold.calibration)}" for fold in folds]


def as_json(stack: Calibration, cells: Sequence[GpuCell], times: Times, found: Sequence[Comparison],
            results: dict) -> str:  # fmt: skip
    cell_rows = {cell.key: {"measured_s": cell.jct_mean_s} | {way: float(times[way][cell.key].mean()) for way in WAYS}
                 for cell in cells}  # fmt: skip
    comparison_rows = [{"call": c.label, "policy": c.cell.policy, "rival": c.rival.policy,
                        "measured_pct": c.measured.estimate, "measured_lo": c.measured.lo, "measured_hi": c.measured.hi}
                       | {way: c.simulated_pct(times[way]) for way in WAYS} for c in found]  # fmt: skip
    return json.dumps({"stack": STACK, "constants": constants(stack), **results, "cells": cell_rows,
                       "comparisons": comparison_rows})  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, nargs="+", help=f"GPU run folders (default: every one in {GPU_RUNS_DIR})")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        cells = read_runs(args.runs or run_dirs())
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    stack, folds = fit_stack(cells), leave_one_run_out(cells)
    times = {"today": {cell.key: simulated_job_times(cell, None) for cell in cells},
             "in-sample": {cell.key: simulated_job_times(cell, stack) for cell in cells},
             "held out": held_out(folds)}  # fmt: skip
    summaries = {way: error_summary(cells, times[way]) for way in WAYS}
    found = comparisons(cells)
    margins = tier_margins(found, times)
    passed = acceptance(summaries, found, times, margins)
    print(f"# {STACK}: {len(cells)} GPU cells of {len({cell.run.run for cell in cells})} runs\n")
    print(cell_table(cells, times), summary_table(summaries), comparison_table(found, times), sep="\n\n", end="\n\n")
    for gpu, row in margins.items():
        print(f"native-offload over lmcache on {gpu}: measured {row['measured']:+.1f}%, "
              + ", ".join(f"{way} {row[way]:+.1f}%" for way in WAYS))
    print("", *constants_lines(stack, folds), "", *roofline_lines(cells, stack), "", sep="\n")
    print(*(f"{'holds' if holds else 'FAILS'}: {claim}" for claim, holds in passed.items()), "", sep="\n")
    elapsed = time.monotonic() - started
    print(f"{elapsed:.0f} s")
    print(as_json(stack, cells, times, found, {"summaries": summaries, "margins": margins, "acceptance": passed,
                                               "elapsed_s": round(elapsed, 1)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
