"""Fit the simulator's few physical constants on the H200 measurements, and report the error per cell; or fit an
engine stack on GPU runs.

    kvsweep calibrate                                 # the table for the shipped calibration.toml (source-study)
    kvsweep calibrate --fit                           # refit, rewrite calibration.toml, print the table
    kvsweep calibrate --stack vllm-0.26 docs/gpu-runs/2026-11-*/   # fit a stack on GPU runs (``sim.stack_fit``)

Only the H200 files in ``measured/`` (copied from the source study) are used: the large-DRAM sweep
(400 GB, fcfs / continuum / lmcache, JPS 1-15) and the bottleneck ablation (64 GB, with LMCache's 1 GB
"nocache" variant). The fitted constants describe the software stack (kernel efficiency, the per-step
overhead, LMCache's save stall), not a GPU; every other GPU gets its own roofline from its datasheet and its
measured rates (``roofline.rates``) with the same constants. The objective is the squared log error of average JCT
over all cells, so a cell at 700 s and a cell at 8 s weigh the same.

With ``--stack NAME RUN_DIR...`` it fits the engine stack ``NAME`` instead on the GPU cells those runs measured
(``sim.stack_fit``), every run left out in turn to say how well it predicts a run it has not seen, and writes
``fitted_stacks/NAME.toml`` (``sim.stacks``) with the runs it read and each constant's source.

The per-request overhead (``seq_overhead_s``) is not fitted here: the H200 cells run batches of about 20
requests, where it hardly shows (between 0.14 and 0.02 ms their RMS log error moves from 0.121 to 0.133), so
``benchmarks/public_figures.py --derive`` takes it from a published figure at batches near 1,000.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.inputs.parser import command_parser
from orchestrator.roofline.hardware import CALIBRATION_FILE, Calibration, Device
from orchestrator.sim.config import sim_engine
from orchestrator.sim.error_bands import SIM_ERROR_FILE, TIE, write_errors
from orchestrator.sim.loop import simulate
from orchestrator.sim.stacks import check_new_name, stack_path
from orchestrator.workload.spec import WorkloadSpec

MEASURED_DIR = Path(__file__).parent / "measured"
MODEL = "llama-3.1-8b-instruct"
# What is fitted, with the range each may take (the search runs on log scale inside it).
FITTED: dict[str, tuple[float, float]] = {
    "compute_efficiency": (0.2, 0.9),
    "hbm_efficiency": (0.3, 0.95),
    "step_overhead_s": (0.0005, 0.05),
    "lmcache_save_step_s": (0.0005, 0.1),
    "lmcache_save_chunk_s": (0.00005, 0.01),
}


# The source study's names for what it ran, in this project's policies. Its Continuum is the public
# prototype (Weili-0234/vllm-continuum), which pins a finished turn only when it parses the turn's output as
# exactly one fenced bash block. The study's outputs were 20 forced tokens (ignore_eos), which never parse
# so: the prototype pinned nothing, and what remained of it is its order (jobs by arrival, the youngest
# job's request preempted first), our `job-fcfs`. The calibration set agrees: with the constants fitted under
# the earlier mapping (`continuum-no-reserve`, RMS log error 0.144), `job-fcfs` gives 0.129, and its T8 at 6,
# 10 and 15 JPS (4.7, 4.9, 5.2 s) is the measured 4.9, 5.2, 5.2 s. See docs/simulator.md.
SOURCE_POLICIES = {"continuum": "job-fcfs"}


@dataclass(frozen=True)
class MeasuredCell:
    source: str
    gpu: str
    policy: str
    jps: float
    dram_gb: float
    avg_jct_s: float


def measured_cells(directory: Path = MEASURED_DIR) -> list[MeasuredCell]:
    cells = []
    with open(directory / "h200_large_dram_jct.csv") as handle:
        for row in csv.DictReader(handle):
            cells.append(MeasuredCell("large_dram", row["gpu"], row["policy"], float(row["jps"]), float(row["dram_gb"]),
                                      float(row["avg_jct_s"])))  # fmt: skip
    with open(directory / "h200_bottleneck_ablation_jct.csv") as handle:
        for row in csv.DictReader(handle):
            cells.append(MeasuredCell("ablation_64gb", row["gpu"], row["policy"], float(row["jps"]), 64.0,
                                      float(row["avg_jct_s"])))  # fmt: skip
    return cells


def simulated_jct(cell: MeasuredCell, calibration: Calibration) -> float:
    workload = WorkloadSpec(jps=cell.jps)
    policy = SOURCE_POLICIES.get(cell.policy, cell.policy)
    engine = sim_engine(Device.gpu(cell.gpu), MODEL, policy, cell.dram_gb, workload, calibration=calibration)
    jcts = [job.jct_s for job in simulate(workload, engine).jobs if job.jct_s is not None]
    return statistics.fmean(jcts) if jcts else math.inf


def _simulate_all(calibration: Calibration, cells: list[MeasuredCell], pool: ProcessPoolExecutor) -> list[float]:
    return list(pool.map(simulated_jct, cells, [calibration] * len(cells)))


def log_error(simulated: list[float], cells: list[MeasuredCell]) -> float:
    return statistics.fmean(math.log(sim / cell.avg_jct_s) ** 2 for sim, cell in zip(simulated, cells))


def _to_calibration(base: Calibration, point) -> Calibration:
    values = {}
    for (name, (low, high)), x in zip(FITTED.items(), point):
        # x in (-inf, inf) maps smoothly into (low, high) on a log scale.
        values[name] = math.exp(math.log(low) + (math.log(high) - math.log(low)) / (1 + math.exp(-x)))
    return base.with_values(**values)


def _from_calibration(calibration: Calibration) -> list[float]:
    point = []
    for name, (low, high) in FITTED.items():
        share = (math.log(getattr(calibration, name)) - math.log(low)) / (math.log(high) - math.log(low))
        share = min(max(share, 1e-3), 1 - 1e-3)
        point.append(math.log(share / (1 - share)))
    return point


def fit(cells: list[MeasuredCell], start: Calibration, pool: ProcessPoolExecutor, max_evaluations: int) -> Calibration:
    from scipy.optimize import minimize

    evaluations = 0

    def objective(point) -> float:
        nonlocal evaluations
        evaluations += 1
        error = log_error(_simulate_all(_to_calibration(start, point), cells, pool), cells)
        print(f"  evaluation {evaluations}: rms log error {math.sqrt(error):.3f}", file=sys.stderr, flush=True)
        return error

    origin = _from_calibration(start)
    # A wide first simplex (one unit of logit per parameter), so the search is not stuck near the start.
    simplex = [origin] + [[x + (1.0 if i == j else 0.0) for j, x in enumerate(origin)] for i in range(len(origin))]
    result = minimize(objective, origin, method="Nelder-Mead",
                      options={"maxfev": max_evaluations, "xatol": 0.02, "fatol": 1e-4, "initial_simplex": simplex})  # fmt: skip
    return _to_calibration(start, result.x)


def h200_log_error(calibration: Calibration, processes: int = 2) -> float:
    """The RMS log error of average JCT over the H200 calibration cells under ``calibration``."""
    cells = measured_cells()
    with ProcessPoolExecutor(processes) as pool:
        return math.sqrt(log_error(_simulate_all(calibration, cells, pool), cells))


def write_calibration(calibration: Calibration, rms_log_error: float, path: Path = CALIBRATION_FILE) -> None:
    lines = [
        "# The simulator's physical constants. All but seq_overhead_s are fitted by `python -m orchestrator.sim.calibrate",
        "# --fit` on the H200 measurements in measured/ only (large-DRAM sweep and the 64 GB bottleneck ablation);",
        "# seq_overhead_s, the per-request cost of a step, is derived by `python benchmarks/public_figures.py --derive`",
        "# from a published figure at batches near 1,000 requests, which the H200 cells (about 20) cannot pin.",
        f"# RMS log error of average JCT over the H200 cells: {rms_log_error:.3f}. See docs/simulator.md.",
        "[calibration]",
    ]
    lines += [f"{name} = {value:.6g}" for name, value in asdict(calibration).items()]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


def policy_errors(cells: list[MeasuredCell], jcts: list[float]) -> dict[str, float]:
    """Per policy: the root mean square of the relative error of mean JCT over its calibration cells, under
    the name of the policy the simulator ran for them (``SOURCE_POLICIES``)."""
    squares: dict[str, list[float]] = {}
    for cell, jct in zip(cells, jcts):
        policy = SOURCE_POLICIES.get(cell.policy, cell.policy)
        squares.setdefault(policy, []).append(((jct - cell.avg_jct_s) / cell.avg_jct_s) ** 2)
    return {policy: math.sqrt(statistics.fmean(values)) for policy, values in squares.items()}


def winners(cells: list[MeasuredCell], jcts: list[float]) -> dict[tuple[str, float], tuple[str, str]]:
    """Per (source, JPS): the measured and the simulated winning policy ("a tie of ..." when the best
    simulated policies are within ``TIE`` of each other)."""
    groups: dict[tuple[str, float], list[tuple[MeasuredCell, float]]] = {}
    for cell, jct in zip(cells, jcts):
        groups.setdefault((cell.source, cell.jps), []).append((cell, jct))
    won = {}
    for key, rows in groups.items():
        best = min(jct for _, jct in rows)
        tied = [cell.policy for cell, jct in rows if jct <= best * (1 + TIE)]
        simulated = tied[0] if len(tied) == 1 else f"a tie of {' and '.join(tied)}"
        won[key] = (min(rows, key=lambda row: row[0].avg_jct_s)[0].policy, simulated)
    return won


def report(cells: list[MeasuredCell], jcts: list[float]) -> str:
    lines = ["| source | policy | JPS | measured JCT s | simulated JCT s | error |", "|---|---|---|---|---|---|"]
    for cell, jct in zip(cells, jcts):
        lines.append(f"| {cell.source} | {cell.policy} | {cell.jps:g} | {cell.avg_jct_s:.2f} | {jct:.2f} | "
                     f"{(jct - cell.avg_jct_s) / cell.avg_jct_s:+.0%} |")  # fmt: skip
    worst = max(abs(jct - cell.avg_jct_s) / cell.avg_jct_s for cell, jct in zip(cells, jcts))
    lines += ["", "| source | JPS | measured winner | simulated winner |", "|---|---|---|---|"]
    won = winners(cells, jcts)
    for (source, jps), (measured, simulated) in won.items():
        lines.append(f"| {source} | {jps:g} | {measured} | {simulated}{'' if measured == simulated else ' (differs)'} |")
    matches = sum(measured == simulated for measured, simulated in won.values())
    ties = sum(simulated.startswith("a tie") for _, simulated in won.values())
    lines += ["", f"Worst cell error {worst:.0%}; winner matches at {matches} of {len(won)} (source, JPS) groups, "
              f"{ties} simulated ties; RMS log error {math.sqrt(log_error(jcts, cells)):.3f}."]  # fmt: skip
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = command_parser("calibrate", __doc__)
    p.add_argument("--fit", action="store_true", help="refit and rewrite calibration.toml")
    p.add_argument("--max-evaluations", type=int, default=150, help="Nelder-Mead budget (each simulates every cell)")
    p.add_argument("--processes", type=int, default=2, help="processes simulating the cells at once; default: 2")
    p.add_argument("--write-errors", action="store_true",
                   help=f"rewrite the calibration's table in {SIM_ERROR_FILE.name}, the error per policy")  # fmt: skip
    p.add_argument("--stack", metavar="NAME",
                   help="fit the engine stack NAME (e.g. vllm-0.26) on the GPU runs RUN_DIR... and write "
                   "orchestrator/sim/fitted_stacks/NAME.toml; default: check the source study's calibration")  # fmt: skip
    p.add_argument("run_dirs", nargs="*", type=Path, metavar="RUN_DIR",
                   help="with --stack: GPU run folders (docs/gpu-runs/<date>-<GPU>...), each a fold left out in turn")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.stack is not None:
        if args.fit or args.write_errors:
            p.error("--stack fits on GPU runs: --fit and --write-errors are the source study's")
        try:
            check_new_name(args.stack)
        except ValueError as error:
            p.error(str(error))
        if not args.run_dirs:
            p.error(f"--stack {args.stack} needs the GPU runs to fit on: RUN_DIR... (e.g. docs/gpu-runs/2026-11-*/)")
        return fit_stack_command(args.stack, args.run_dirs)
    if args.run_dirs:
        p.error(f"RUN_DIR ({args.run_dirs[0]}) is read with --stack NAME only")
    cells = measured_cells()
    calibration = Calibration.load()
    with ProcessPoolExecutor(args.processes) as pool:
        if args.fit:
            calibration = fit(cells, calibration, pool, args.max_evaluations)
        jcts = _simulate_all(calibration, cells, pool)
    if args.fit:
        write_calibration(calibration, math.sqrt(log_error(jcts, cells)))
        print(f"wrote {CALIBRATION_FILE}")
    if args.write_errors:
        write_errors("calibration", policy_errors(cells, jcts))
        print(f"wrote {SIM_ERROR_FILE}")
    print("\n".join(f"{name} = {value:.6g}" for name, value in asdict(calibration).items()))
    print(report(cells, jcts))
    return 0


def fit_stack_command(name: str, directories: list[Path]) -> int:
    """Fit the stack ``name`` on the GPU runs ``directories``; print its in-sample and held-out errors; write it."""
    # Here, not at the top: the stack fit and the runs' records load scipy, which the source-study table never needs.
    from orchestrator.sim import stack_fit
    from orchestrator.sim.gpu_cells import read_runs

    try:
        cells = read_runs(directories)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    num_runs = len({cell.run.run for cell in cells})
    if num_runs < 2:
        print(f"error: {len(cells)} cells of {num_runs} runs in {', '.join(map(str, directories))}: a stack is fitted "
              "on at least two GPU runs, so that each can be left out", file=sys.stderr)  # fmt: skip
        return 2
    print(f"fitting {name} on {len(cells)} GPU cells of {num_runs} runs, then once per run left out", file=sys.stderr,
          flush=True)  # fmt: skip
    calibration = stack_fit.fit_stack(cells)
    folds = stack_fit.leave_one_run_out(cells)
    in_sample = {cell.key: stack_fit.simulated_job_times(cell, calibration) for cell in cells}
    held = stack_fit.held_out(folds)
    for way, times in (("in-sample", in_sample), ("held out", held)):
        overall = stack_fit.error_summary(cells, times)["all"]
        print(f"{way}: median |error| of mean JCT {overall['median']:.1%}, worst {overall['worst']:.1%} over "
              f"{len(cells)} cells")  # fmt: skip
    errors = stack_fit.held_out_errors(cells, held)
    print("held-out RMS error per policy (the stack's error bands): "
          + ", ".join(f"{policy} {error:.1%}" for policy, error in errors.items()))
    command = " ".join(["kvsweep calibrate --stack", name, *sorted(map(str, directories))])
    path = stack_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(stack_fit.stack_toml(calibration, stack_fit.Provenance.of(cells), errors, name, command))
    tmp.replace(path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
