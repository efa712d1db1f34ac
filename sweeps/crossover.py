"""Find the load at which the verdict between two policies changes, by bisection over jobs per second.

    python sweeps/crossover.py --gpu H200 --policies fcfs,continuum [--jps-min 1 --jps-max 15]
        [--resolution 0.5] [--engine sim|vllm|auto] [--confirm] [--dram-gb 400] [--trials N] [...every sweep flag]

The search starts from a few loads spread geometrically over [jps-min, jps-max], then halves (geometrically)
every interval whose two ends got different verdicts (a winner, or a tie: analysis/verdicts.py) until it is
no wider than the resolution. With ``--engine sim`` or ``auto`` it searches in the simulator; ``--confirm``
then measures the two loads that bracket each change on real vLLM (cells of a GPU type the cluster lacks
stay pending, and say so). Where the measurement disagrees with the simulator at a side of the bracket, it
walks that way until it reads the simulated verdict, then bisects the measured change to the resolution:
``confirmed`` says whether the real engine changes between the same two verdicts, ``vllm_jps_below`` and
``vllm_jps_above`` where. ``--engine vllm`` searches on real vLLM directly. ``--gpu cpu`` is the CPU
engine: the simulator first measures it on this machine (one fcfs cell at 2 JPS, sweep
``<sweep>-profile``, ``orchestrator/sweep/profiling.py``), so the search and its confirmation run here.

Every load is an ordinary cell of one sweep (``crossover-<gpu>-<a>-<b>``): tracked, resumable, and a
re-run after a kill finds the same loads done and runs only the rest. The flips are printed and written
to ``DIR/<sweep>/crossover.csv``; the sweep's report shows the winner at every load measured and where it
changes.
"""

import math
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

if __name__ == "__main__":
    # The project root replaces this script's folder on the path (see large_dram.py).
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import pandas as pd  # noqa: E402

from orchestrator.gpus import CPU  # noqa: E402
from orchestrator.records.layout import SweepFiles  # noqa: E402
from orchestrator.records.store import atomic_write_csv  # noqa: E402
from orchestrator.sweep.cli import parser, prepare, run_with_one_line_errors  # noqa: E402
from orchestrator.sweep.profiling import measure_cpu_profile, profile_spec  # noqa: E402
from orchestrator.sweep.spec import EngineKind, SweepSpec  # noqa: E402
from orchestrator.validation import InputError  # noqa: E402
from orchestrator.workload.spec import WorkloadSpec  # noqa: E402
from sweeps.cpu_tiny import SPEC as CPU_TINY  # noqa: E402

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
START_LOADS = 5

SPEC = SweepSpec(
    name="crossover",
    engine=EngineKind.SIM,
    gpus=("H200",),
    policies=("fcfs", "continuum"),
    jps=(1.0,),
    dram_gb=(400,),
    model=LLAMA_8B,
    workload=WorkloadSpec(jps=1, duration_s=45),
)

# --gpu cpu: the CPU engine as sweeps/cpu_tiny.py runs it (the tiny model, its workload and its pool).
CPU_SPEC = CPU_TINY.model_copy(update={"name": "crossover", "jps": (1.0,)})

Judge = Callable[[list[float]], dict[float, str]]
NOT_MEASURED = "not measured"  # a load whose cells could not run (their GPU type is absent): no verdict


def start_loads(jps_min: float, jps_max: float, num_start: int = START_LOADS) -> list[float]:
    """The search's first loads: ``num_start`` spread geometrically over the range, both ends included."""
    ratio = (jps_max / jps_min) ** (1 / (num_start - 1))
    return [round(jps_min * ratio**i, 3) for i in range(num_start - 1)] + [jps_max]


Flip = tuple[float, float, str, str]  # (load below, load above, verdict below, verdict above)


def bisect_flips(judge: Judge, jps_min: float, jps_max: float, resolution: float,
                 num_start: int = START_LOADS) -> list[Flip]:  # fmt: skip
    """Every (load below, load above, verdict below, verdict above) no wider than ``resolution`` where the
    verdict changes. ``judge(loads)`` gives each load's verdict; each round asks it for all the loads the
    round needs at once, and the loads depend only on the verdicts, so a repeated search asks the same."""
    loads = start_loads(jps_min, jps_max, num_start)
    return narrow_flips(judge, judge(loads), resolution)


def narrow_flips(judge: Judge, verdicts: dict[float, str], resolution: float) -> list[Flip]:
    """Halve (geometrically) every interval between adjacent loads of ``verdicts`` whose ends differ until it
    is no wider than ``resolution``; the flips found, each round's loads asked of ``judge`` at once."""
    verdicts = dict(verdicts)
    loads = sorted(verdicts)
    brackets = [(a, b) for a, b in zip(loads, loads[1:]) if verdicts[a] != verdicts[b]]
    flips = []
    while brackets:
        narrow = [(a, b) for a, b in brackets if b - a <= resolution or round(math.sqrt(a * b), 3) in (a, b)]
        flips += [(a, b, verdicts[a], verdicts[b]) for a, b in narrow]
        wide = [(a, b) for a, b in brackets if (a, b) not in narrow]
        middles = {(a, b): round(math.sqrt(a * b), 3) for a, b in wide}
        verdicts |= judge(sorted(set(middles.values()))) if middles else {}
        halves = [pair for (a, b), mid in middles.items() for pair in ((a, mid), (mid, b))]
        brackets = [(x, y) for x, y in halves if verdicts[x] != verdicts[y]]
    return sorted(flips)


def locate_flip(judge: Judge, flip: Flip, jps_min: float, jps_max: float,
                resolution: float) -> tuple[dict[float, str], list[Flip]]:  # fmt: skip
    """Where the measured engine changes verdict near a simulated ``flip``: its two loads are measured; on a
    side where the measurement does not read the simulated verdict, the search walks away from the flip
    (each step geometrically twice the last, within the range) until it does, the range ends or a load
    cannot be measured (its GPU type is absent), then narrows every change between the loads measured.
    Measures nothing more when the two loads agree with the simulation; a simulator that puts a flip at the
    wrong load costs a few loads, not a new search. Returns the verdicts of the two loads and of the walk,
    and every change found."""
    below, above, sim_below, sim_above = flip
    verdicts = judge([below, above])
    ratio = above / below
    for side, wanted, limit in ((-1, sim_below, jps_min), (1, sim_above, jps_max)):
        load, step = (below, above)[side > 0], ratio
        while verdicts[load] not in (wanted, NOT_MEASURED) and load != limit:
            load = max(limit, round(load / step, 3)) if side < 0 else min(limit, round(load * step, 3))
            verdicts |= judge([load])
            step *= step
    measured = {load: verdict for load, verdict in verdicts.items() if verdict != NOT_MEASURED}
    return verdicts, narrow_flips(judge, measured, resolution)


def sweep_judge(spec: SweepSpec, options, engine: EngineKind) -> Judge:
    """Verdicts from measuring: each call runs the sweep with every load asked so far (those done are
    skipped) and reads the verdict of each load asked from the sweep's results."""
    from analysis.load import cell_records
    from analysis.verdicts import verdict_label, verdicts
    from orchestrator.sim.error_bands import load_policy_errors
    from orchestrator.sweep.driver import EXIT_INTERRUPTED, run_sweep

    asked: set[float] = set()
    files = SweepFiles(options.results_dir / spec.name)

    def judge(loads: list[float]) -> dict[float, str]:
        asked.update(loads)
        print(f"[{spec.name}] measuring {engine.value} at {', '.join(f'{jps:g}' for jps in loads)} jobs per second",
              flush=True)  # fmt: skip
        # No report per round: its plots cost more than a simulated round's cells. The search builds one at the end.
        code = run_sweep(spec.model_copy(update={"engine": engine, "jps": tuple(sorted(asked))}),
                         replace(options, report=False))  # fmt: skip
        if code == EXIT_INTERRUPTED:  # stopped by a signal: so is the search; a re-run resumes it
            raise SystemExit(code)
        summary = pd.read_parquet(files.summary)
        table, _ = verdicts(summary[summary.engine == engine.value], cell_records(files), load_policy_errors())
        by_load = {row.jps: verdict_label(row) for row in table.itertuples()}
        return {jps: by_load.get(jps, NOT_MEASURED) for jps in loads}

    return judge


def main(argv: list[str] | None = None) -> int:
    p = parser(SPEC)
    p.description = __doc__.split("\n")[0]
    p.add_argument("--gpu", help="the GPU type to search on (same as --gpus with one type), or cpu: the CPU engine "
                   "with sweeps/cpu_tiny.py's model, workload and pool")
    p.add_argument("--jps-min", type=float, default=1.0, help="lowest load searched; default: 1")
    p.add_argument("--jps-max", type=float, default=15.0, help="highest load searched; default: 15")
    p.add_argument("--resolution", type=float, default=0.5, help="width in jobs per second of each bracket found")
    p.add_argument("--confirm", action="store_true", help="measure each bracket on real vLLM after a simulated "
                   "search, and locate the measured change where it lies elsewhere")
    args = p.parse_args(argv)
    if args.gpu:
        args.gpus = [args.gpu]
    return run_with_one_line_errors(lambda: _search(args))


def _search(args) -> int:
    # --engine picks where the search runs. The CPU engine's sweep is checked as the real one it is: the simulator
    # can run it only once it is profiled.
    searched_on, args.engine = args.engine, None
    spec, options = prepare(CPU_SPEC if args.gpus == [CPU] else SPEC, args)
    if len(spec.gpus) != 1 or len(spec.policies) != 2:
        raise InputError(f"--gpu and --policies: one GPU type and two policies, got {', '.join(spec.gpus)} and "
                         f"{', '.join(spec.policies)}")  # fmt: skip
    if not 0 < args.jps_min < args.jps_max or not args.resolution > 0:
        raise InputError(f"--jps-min {args.jps_min:g} --jps-max {args.jps_max:g} --resolution {args.resolution:g}: "
                         "valid is 0 < jps-min < jps-max and a positive resolution")  # fmt: skip
    if not args.name:
        spec = spec.model_copy(update={"name": f"crossover-{spec.gpus[0]}-{'-'.join(spec.policies)}"})
    search_engine = EngineKind.VLLM if searched_on == EngineKind.VLLM.value else EngineKind.SIM
    needs_profile = search_engine is EngineKind.SIM and spec.gpus == (CPU,)
    if options.dry_run:
        return _dry_run(spec, options, search_engine, needs_profile, start_loads(args.jps_min, args.jps_max))
    if needs_profile:
        spec = spec.model_copy(update={"cpu_profile": measure_cpu_profile(spec, options)})
        print(f"[{spec.name}] the CPU engine on this machine, as the simulator will run it: "
              f"{spec.cpu_profile.describe()}")  # fmt: skip
    # The search's engine must be able to run the GPU type.
    SweepSpec.model_validate(spec.model_copy(update={"engine": search_engine}).model_dump())
    flips = bisect_flips(sweep_judge(spec, options, search_engine), args.jps_min, args.jps_max, args.resolution)
    searched = search_engine.value
    rows = [{"jps_below": a, "jps_above": b, f"{searched}_below": below, f"{searched}_above": above}
            for a, b, below, above in flips]  # fmt: skip
    if args.confirm and search_engine is EngineKind.SIM and flips:
        measure = sweep_judge(spec, options, EngineKind.VLLM)
        for row, flip in zip(rows, flips):
            row |= confirmation(*locate_flip(measure, flip, args.jps_min, args.jps_max, args.resolution), flip)
    table = pd.DataFrame(rows)
    atomic_write_csv(table, SweepFiles(options.results_dir / spec.name).crossover)
    report_search(spec.name, options)
    print(f"[{spec.name}] {len(flips)} change(s) of verdict between {args.jps_min:g} and {args.jps_max:g} jobs per "
          "second:")
    print(table.to_string(index=False) if len(table) else "  none: the same verdict at every load searched")
    return 0


def confirmation(measured: dict[float, str], measured_flips: list[Flip], simulated: Flip) -> dict:
    """The crossover.csv columns of one simulated flip's measurement: the verdicts at its two loads, whether the
    measured engine changes between the same two verdicts (there or nearby: ``confirmed``), the bracket of the
    nearest such change, and every change the measurement found."""
    below, above, sim_below, sim_above = simulated
    middle = math.sqrt(below * above)
    same = sorted((flip for flip in measured_flips if flip[2:] == (sim_below, sim_above)),
                  key=lambda flip: abs(math.log(math.sqrt(flip[0] * flip[1]) / middle)))  # fmt: skip
    nearest = same[0] if same else (math.nan, math.nan)
    return {"vllm_below": measured[below], "vllm_above": measured[above],
            "at_simulated_loads": (measured[below], measured[above]) == (sim_below, sim_above),
            "confirmed": bool(same), "vllm_jps_below": nearest[0], "vllm_jps_above": nearest[1],
            "vllm_changes": "; ".join(f"{a:g}-{b:g}: {va} to {vb}" for a, b, va, vb in measured_flips)}  # fmt: skip


def report_search(sweep: str, options) -> None:
    """The sweep's report, built once the search is over (its rounds build none): every done cell, the rounds'
    and any confirmation's alike."""
    from orchestrator.sweep.driver import publish_report
    from orchestrator.sweep.results import SweepResults
    from orchestrator.sweep.tracking import SweepTracker

    publish_report(SweepResults(options.results_dir / sweep), SweepTracker.read_only(options.tracking_uri, sweep))


def _dry_run(spec: SweepSpec, options, engine: EngineKind, needs_profile: bool, loads: list[float]) -> int:
    """What the search would run first: the profiling cell (the CPU engine in the simulator), or the start
    loads; the loads after them depend on the verdicts measured there."""
    from orchestrator.sweep.driver import run_sweep

    first = profile_spec(spec) if needs_profile else spec.model_copy(update={"engine": engine, "jps": tuple(loads)})
    code = run_sweep(first, options)
    listed = ", ".join(f"{jps:g}" for jps in loads)
    start = f"the search starts at {listed} jobs per second and " if needs_profile else ""
    print(f"[{spec.name}] dry run: then {start}halves every interval whose two ends get different verdicts")
    return code


if __name__ == "__main__":
    sys.exit(main())
