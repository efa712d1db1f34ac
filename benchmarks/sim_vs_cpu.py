"""The simulator against the real engine under memory pressure: the CPU build of vLLM and the tiny model.

    python benchmarks/sim_vs_cpu.py [--results-dir DIR] [--pools 9600,2400,1200] [--jps 1,2.5,4]
        [--policies fcfs,continuum,continuum-prototype,job-fcfs] [--duration-s 10] [--trials 3]
        [--write-errors] [any sweep flag]

1. Profiles the real engine once, on cells of their own: three trials of fcfs at 2 JPS on seed 7 with a
   2400-block pool (sweep ``pressure-profile``, ``orchestrator/sweep/runtime/profiling.py``), run spread through the
   study (a share of them before each pool's cells) so that the profile sees the machine at the speed it
   runs the study at. Their step times fit the CPU's roofline and their request latencies the API server's
   time per request (``orchestrator/sim/profile.py``). That is the simulator's whole configuration of this
   machine: nothing is fitted on the cells compared.
2. For each KV pool size, from one that holds every job in flight to one far too small, measures every
   policy at every load on the real engine (sweep ``pressure-<blocks>``) and simulates the same cells from
   the profile (``pressure-<blocks>-sim``: same schedules, same pool).
3. Compares each (pool, policy, load), its trials together (``analysis/fidelity.py``): mean JCT, the turn
   where latency spikes (or one the measurement cannot tell from it), the level of turns 3+, a request's
   time in the engine and before it, the prefix share turns 3+ found, preemptions; and per (pool, load) the
   measured verdict against the simulated one. A diagnostic column simulates each trial again on the profile
   slowed to the pace its real engine stepped at (measured from the step times alone): the error left there
   is the simulator's mechanisms', the rest is how fast the shared machine ran. Prints the tables;
   ``pressure.json`` in the results directory has it all, and the last line is one JSON object.
   ``--write-errors`` stores the RMS error per policy as the simulator's ``cpu_pressure`` error band
   (``orchestrator/sim/error_bands.py``).

All sweeps are ordinary sweeps: re-running fills only what is missing. The CPU engine's speed depends on the
machine, so measure the profile and the cells in one go on a quiet machine.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import asdict

import pandas as pd

from orchestrator.analysis.fidelity import CellShape, cell_shape, error_by_policy, relative_error, shape_row
from orchestrator.analysis.load import cell_records
from orchestrator.analysis.verdicts import censored_job_times, verdicts
from orchestrator.cell.cell_json import read_cell_json
from orchestrator.cell.spec import EngineKind
from orchestrator.cli.sweep import parse_list, parser, prepare, run_with_one_line_errors
from orchestrator.inputs.validation import InputError
from orchestrator.models.arch import ModelArch, load_model
from orchestrator.records.cell import CellStatus
from orchestrator.records.layout import CellFiles, SweepFiles
from orchestrator.records.names import read_summary
from orchestrator.records.scheduler_trace_file import trace_events, trace_file_frame
from orchestrator.records.verdict import VerdictKind, read_verdicts
from orchestrator.roofline.hardware import CpuProfile
from orchestrator.sim.error_bands import SIM_ERROR_FILE, SimErrors, write_errors
from orchestrator.sim.loop import simulate
from orchestrator.sim.profile import cpu_sim_engine, step_pace
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.sweep.runtime.driver import run_sweep
from orchestrator.sweep.runtime.profiling import profile_spec, read_cpu_profile
from orchestrator.sweeps.cpu_tiny import SPEC as CPU_TINY
from orchestrator.workload.spec import WorkloadSpec

JCT_TARGET = 0.20  # the simulator's mean JCT within 20% of the measurement in every cell
PRESSURE = CPU_TINY.model_copy(update={
    "name": "pressure", "policies": ("fcfs", "continuum", "continuum-prototype", "job-fcfs"), "jps": (1.0, 2.5, 4.0),
    "workload": CPU_TINY.workload.model_copy(update={"duration_s": 10.0}),
})  # fmt: skip


def pool_spec(base: SweepSpec, num_kv_blocks: int) -> SweepSpec:
    """The measured sweep of one pool size."""
    options = base.engine_options.model_copy(update={"num_kv_blocks": num_kv_blocks})
    return base.model_copy(update={"name": f"{base.name}-{num_kv_blocks}", "engine_options": options})


def simulated_twin(measured: SweepSpec, profile: CpuProfile) -> SweepSpec:
    """The same cells in the simulator, the CPU engine simulated from ``profile``."""
    return measured.model_copy(update={"name": f"{measured.name}-sim", "engine": EngineKind.SIM,
                                       "cpu_profile": profile})  # fmt: skip


def done_trials(files: SweepFiles) -> dict[tuple[str, float], list[CellFiles]]:
    """The done cells of a sweep by (policy, JPS): every trial of each."""
    summary = read_summary(files.summary)
    return {(policy, float(jps)): [files.cell(key) for key in rows.cell_key]
            for (policy, jps), rows in summary[summary.status == CellStatus.DONE.value].groupby(["policy", "jps"])}


def done_shapes(files: SweepFiles) -> dict[tuple[str, float], CellShape]:
    """The shape of every (policy, JPS) of a sweep, over the done cells of all its trials together (a job with no
    end at all, which a cell that waits out its jobs' timeouts does not leave, would be censored at the longest
    any job of those trials ran)."""
    return {group: cell_shape(pd.concat([pd.read_parquet(cell.requests) for cell in cells], ignore_index=True),
                              pd.concat([pd.read_parquet(cell.jobs) for cell in cells], ignore_index=True),
                              [event for cell in cells for event in trace_events(cell.scheduler_trace.read_bytes())])
            for group, cells in done_trials(files).items()}  # fmt: skip


def paced_trials(files: SweepFiles, profile: CpuProfile, arch: ModelArch) -> dict[tuple[str, float],
                                                                                  list[tuple[WorkloadSpec, float]]]:
    """Per (policy, JPS) of a measured sweep, each done trial's workload as its cell recorded it and its step pace
    (``sim/profile.py`` ``step_pace``): how slowly the real engine stepped against the profile, the machine's
    speed while it ran."""
    return {group: [(read_cell_json(cell.config).cell.workload,
                     step_pace(profile, arch, trace_file_frame(cell.scheduler_trace))) for cell in cells]
            for group, cells in done_trials(files).items()}  # fmt: skip


def jct_at_measured_pace(profile: CpuProfile, arch: ModelArch, policy: str, num_kv_blocks: int,
                         trials: list[tuple[WorkloadSpec, float]]) -> float:  # fmt: skip
    """The simulated mean JCT of a (policy, JPS) with each trial's workload simulated on the profile slowed to the
    pace its real engine stepped at (``CpuProfile.at_pace``). A diagnostic, not a prediction: it takes the
    machine's speed from the measured steps (never their latencies), so what error is left is the simulator's
    mechanisms (admission, eviction, pins, preemption), and the rest of the plain column's is the machine."""
    jobs = []
    for workload, pace in trials:
        engine = cpu_sim_engine(profile.at_pace(pace), arch, policy, 0, workload, num_kv_blocks)
        jobs += [asdict(job) for job in simulate(workload, engine).jobs]
    return float(censored_job_times(pd.DataFrame(jobs)).time_s.mean())


def compare_pool(num_kv_blocks: int, measured: SweepFiles, simulated: SweepFiles,
                 profile: CpuProfile, arch: ModelArch) -> tuple[list[dict], list[dict]]:  # fmt: skip
    """Cell rows and verdict rows of one pool size, for the cells done on both sides. The simulator's verdicts
    here carry no error band: they are what it predicts, judged against the measurement."""
    real, sim, trials = done_shapes(measured), done_shapes(simulated), paced_trials(measured, profile, arch)
    cells = []
    for key in sorted(real.keys() & sim.keys()):
        paced_jct = jct_at_measured_pace(profile, arch, key[0], num_kv_blocks, trials[key])
        cells.append({"kv_blocks": num_kv_blocks, "policy": key[0], "jps": key[1],
                      "step_pace": statistics.fmean(pace for _, pace in trials[key]), "jct_mean_s_paced": paced_jct,
                      "jct_error_paced": relative_error(paced_jct, real[key].jct_mean_s)}
                     | shape_row(real[key], sim[key]))  # fmt: skip
    predicted = {verdict.jps: verdict.label
                 for verdict in verdicts(pd.read_parquet(simulated.summary), cell_records(simulated), SimErrors({}))[0]}
    rows = []
    for verdict in read_verdicts(measured.verdicts):
        if verdict.jps not in predicted or verdict.kind is VerdictKind.UNDECIDED:
            continue
        rows.append({"kv_blocks": num_kv_blocks, "jps": verdict.jps, "measured": verdict.label,
                     "significant": verdict.significant, "margin_pct": verdict.margin_pct,
                     "margin_lo_pct": verdict.margin_lo_pct, "margin_hi_pct": verdict.margin_hi_pct,
                     "simulated": predicted[verdict.jps],
                     "agree": predicted[verdict.jps] == verdict.label if verdict.significant else None})  # fmt: skip
    return cells, rows


def median_error(cells: pd.DataFrame, name: str) -> float:
    """The median over cells of the simulated ``name``'s relative error."""
    return round(float(((cells[f"{name}_sim"] - cells[f"{name}_real"]) / cells[f"{name}_real"]).median()), 3)


def spike_label(peak: int, ties: tuple[int, ...]) -> str:
    """The measured peak turn, and the turns it cannot be told from: ``6 (or 5, 7)``."""
    others = [str(turn) for turn in ties if turn != peak]
    return f"{peak} (or {', '.join(others)})" if others else str(peak)


def print_tables(cells: pd.DataFrame, judgements: pd.DataFrame) -> None:
    print("| pool (blocks) | JPS | policy | mean JCT real / sim | error | spike turn real (or tied) / sim "
          "| turns 3+ real / sim | in engine + waiting per request real / sim | cached of best 3+ real / sim "
          "| preemptions real / sim | real steps vs profile | sim at that pace: JCT, error |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in cells.sort_values(["kv_blocks", "jps", "policy"], ascending=[False, True, True]).itertuples():
        print(f"| {row.kv_blocks:,} | {row.jps:g} | {row.policy} "
              f"| {row.jct_mean_s_real:.1f} / {row.jct_mean_s_sim:.1f} s "
              f"| {row.jct_error:+.0%} "
              f"| {spike_label(row.spike_turn_real, row.spike_turns_real)} / {row.spike_turn_sim} "
              f"| {row.later_mean_s_real:.2f} / {row.later_mean_s_sim:.2f} s "
              f"| {row.engine_mean_s_real:.2f} + {row.wait_mean_s_real:.2f} / "
              f"{row.engine_mean_s_sim:.2f} + {row.wait_mean_s_sim:.2f} s "
              f"| {row.cached_of_best_real:.0%} / {row.cached_of_best_sim:.0%} "
              f"| {row.num_preemptions_real} / {row.num_preemptions_sim} | {row.step_pace:.2f}x "
              f"| {row.jct_mean_s_paced:.1f} s, {row.jct_error_paced:+.0%} |")  # fmt: skip
    print("\n| pool (blocks) | JPS | measured verdict | margin [95% interval] | simulated verdict | agree |")
    print("|---|---|---|---|---|---|")
    for row in judgements.itertuples():
        agree = "n/a (measured tie)" if row.agree is None else ("yes" if row.agree else "NO")
        print(f"| {row.kv_blocks:,} | {row.jps:g} | {row.measured} | {row.margin_pct:+.1f}% "
              f"[{row.margin_lo_pct:+.1f}, {row.margin_hi_pct:+.1f}] | {row.simulated} | {agree} |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = parser(PRESSURE)
    p.description = __doc__.split("\n\n")[0]
    p.add_argument("--pools", nargs="+", default=["9600,2400,1200"],
                   help="KV pool sizes in blocks of 32 tokens, one sweep each; default: 9600,2400,1200")
    p.add_argument("--write-errors", action="store_true",
                   help="write the RMS error per policy as the cpu_pressure table of orchestrator/sim/sim_error.toml, "
                        "the simulator's error bands")  # fmt: skip
    args = p.parse_args(argv)
    return run_with_one_line_errors(lambda: compare(args))


def compare(args) -> int:
    base, options = prepare(PRESSURE, args)
    pools = parse_list(args.pools, int, "pools")
    if min(pools) < 2:
        raise InputError(f"--pools {' '.join(args.pools)}: every pool needs at least 2 blocks "
                         "(vLLM keeps one out of use)")
    if options.dry_run:  # the simulated twins need the profile, which only a real run measures
        return max(run_sweep(spec, options) for spec in [profile_spec(base), *(pool_spec(base, b) for b in pools)])
    profile = measure(base, options, pools)
    print(f"CPU profile from {profile_spec(base).name}: {profile.describe()}")
    cells, judgements = compare_pools(base, options, pools, profile)
    print_tables(cells, judgements)
    summary = fidelity_summary(cells, judgements)
    print(f"\n{describe(summary)}")
    report = {"profile": asdict(profile), "summary": summary, "cells": cells.to_dict("records"),
              "verdicts": judgements.to_dict("records")}  # fmt: skip
    (options.results_dir / "pressure.json").write_text(json.dumps(report, indent=2, default=str))
    print(f"wrote {options.results_dir / 'pressure.json'}")
    if args.write_errors:
        write_errors("cpu_pressure", error_by_policy(cells))
        print(f"wrote the cpu_pressure table of {SIM_ERROR_FILE}")
    print(json.dumps(summary))
    return 0


def measure(base: SweepSpec, options, pools: list[int]) -> CpuProfile:
    """Every pool's measured cells and the profile. On this machine the same work can take twice as long in one
    cell as in another (docs/simulator.md), so the profiling trials are spread through the measured cells
    instead of all run before them."""
    profiling = profile_spec(base)
    for index, blocks in enumerate(pools):
        trials_so_far = math.ceil(profiling.trials * (index + 1) / len(pools))
        for spec in (profiling.model_copy(update={"trials": trials_so_far}), pool_spec(base, blocks)):
            run_to_the_end(spec, options)
    return read_cpu_profile(base, options.results_dir)  # the loop's last round ran every profiling trial


def compare_pools(base: SweepSpec, options, pools: list[int], profile: CpuProfile) -> tuple[pd.DataFrame,
                                                                                            pd.DataFrame]:
    """Each pool's simulated twin, run, and compared with its measurement: cell rows and verdict rows."""
    all_cells, all_verdicts = [], []
    for blocks in pools:
        measured = pool_spec(base, blocks)
        simulated = simulated_twin(measured, profile)
        run_to_the_end(simulated, options)
        pool_cells, pool_verdicts = compare_pool(blocks, SweepFiles(options.results_dir / measured.name),
                                                 SweepFiles(options.results_dir / simulated.name), profile,
                                                 load_model(base.model))  # fmt: skip
        all_cells += pool_cells
        all_verdicts += pool_verdicts
    return pd.DataFrame(all_cells), pd.DataFrame(all_verdicts)


def run_to_the_end(spec: SweepSpec, options) -> None:
    """Run a sweep of the study; one that does not finish ends the study with exit code 1."""
    if run_sweep(spec, options) != 0:
        print(f"error: the sweep {spec.name} did not finish; see {options.results_dir / spec.name}", file=sys.stderr)
        raise SystemExit(1)


def fidelity_summary(cells: pd.DataFrame, judgements: pd.DataFrame) -> dict:
    """The study's figures over every cell and verdict compared."""
    judged = judgements[judgements.agree.notna()]
    within_paced = int((cells.jct_error_paced.abs() <= JCT_TARGET).sum())
    return {
        "worst_jct_error": round(float(cells.jct_error.abs().max()), 3),
        "cells_within_target": f"{int((cells.jct_error.abs() <= JCT_TARGET).sum())}/{len(cells)}",
        "spike_same": f"{int(cells.spike_same.sum())}/{len(cells)}",
        "winner_same_where_measured_significant": f"{int(judged.agree.sum())}/{len(judged)}",
        "jct_error_by_policy": {policy: round(error, 3) for policy, error in error_by_policy(cells).items()},
        "median_error_in_engine": median_error(cells, "engine_mean_s"),
        "median_error_waiting": median_error(cells, "wait_mean_s"),
        "median_step_pace": round(float(cells.step_pace.median()), 3),
        "worst_jct_error_at_measured_pace": round(float(cells.jct_error_paced.abs().max()), 3),
        "cells_within_target_at_measured_pace": f"{within_paced}/{len(cells)}",
    }


def describe(summary: dict) -> str:
    return (f"worst mean-JCT error {summary['worst_jct_error']:.0%} (target: within {JCT_TARGET:.0%} in every cell); "
            f"within target {summary['cells_within_target']}; spike on the same turn {summary['spike_same']}; "
            f"winner the same where the measured one is significant {summary['winner_same_where_measured_significant']}; "
            f"median error of the time in the engine {summary['median_error_in_engine']:+.0%}, "
            f"of the wait {summary['median_error_waiting']:+.0%}; the real engine stepped "
            f"{summary['median_step_pace']:.2f}x as long as profiled (median); simulated at the pace each trial's engine "
            f"stepped, worst error {summary['worst_jct_error_at_measured_pace']:.0%}, within target "
            f"{summary['cells_within_target_at_measured_pace']}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
