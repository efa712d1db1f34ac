"""Find the load at which the verdict between two policies changes, by bisection over jobs per second.

    python sweeps/crossover.py --gpu H200 --policies fcfs,continuum [--jps-min 1 --jps-max 15]
        [--resolution 0.5] [--engine sim|vllm|auto] [--confirm] [--dram-gb 400] [--trials N] [...every sweep flag]

The search starts from a few loads spread geometrically over [jps-min, jps-max], then halves (geometrically)
every interval whose two ends got different verdicts (a winner, or a tie: analysis/verdicts.py) until it is
no wider than the resolution. With ``--engine sim`` or ``auto`` it searches in the simulator; ``--confirm``
then measures the two loads that bracket each change on real vLLM (cells of a GPU type the cluster lacks
stay pending, and say so); ``--engine vllm`` searches on real vLLM directly (the CPU engine: ``--gpu cpu``).

Every load is an ordinary cell of one sweep (``crossover-<gpu>-<a>-<b>``): tracked, resumable, and a
re-run after a kill finds the same loads done and runs only the rest. The flips are printed and written
to ``DIR/<sweep>/crossover.csv``; the sweep's report shows the winner at every load measured and where it
changes.
"""

import math
import sys
from collections.abc import Callable
from pathlib import Path

if __name__ == "__main__":
    # The project root replaces this script's folder on the path (see large_dram.py).
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import pandas as pd  # noqa: E402

from orchestrator.records.layout import SweepFiles  # noqa: E402
from orchestrator.records.store import atomic_write_csv  # noqa: E402
from orchestrator.sweep.cli import parser, prepare, run_with_one_line_errors  # noqa: E402
from orchestrator.sweep.spec import EngineKind, SweepSpec  # noqa: E402
from orchestrator.validation import InputError  # noqa: E402
from orchestrator.workload.spec import WorkloadSpec  # noqa: E402

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

Judge = Callable[[list[float]], dict[float, str]]


def bisect_flips(judge: Judge, jps_min: float, jps_max: float, resolution: float,
                 num_start: int = START_LOADS) -> list[tuple[float, float, str, str]]:  # fmt: skip
    """Every (load below, load above, verdict below, verdict above) no wider than ``resolution`` where the
    verdict changes. ``judge(loads)`` gives each load's verdict; each round asks it for all the loads the
    round needs at once, and the loads depend only on the verdicts, so a repeated search asks the same."""
    ratio = (jps_max / jps_min) ** (1 / (num_start - 1))
    loads = [round(jps_min * ratio**i, 3) for i in range(num_start - 1)] + [jps_max]
    verdicts = judge(loads)
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


def sweep_judge(spec: SweepSpec, options, engine: EngineKind) -> Judge:
    """Verdicts from measuring: each call runs the sweep with every load asked so far (those done are
    skipped) and reads the verdict of each load asked from the sweep's results."""
    from analysis.verdicts import CellRecords, censored_job_times, verdict_label, verdicts
    from orchestrator.sim.calibrate import load_policy_errors
    from orchestrator.sweep.driver import EXIT_INTERRUPTED, run_sweep

    asked: set[float] = set()
    files = SweepFiles(options.results_dir / spec.name)

    def records_of(cell_key: str) -> CellRecords:
        cell = files.cell(cell_key)
        return CellRecords(censored_job_times(pd.read_parquet(cell.jobs)), pd.read_parquet(cell.requests))

    def judge(loads: list[float]) -> dict[float, str]:
        asked.update(loads)
        print(f"[{spec.name}] measuring {engine.value} at {', '.join(f'{jps:g}' for jps in loads)} jobs per second",
              flush=True)  # fmt: skip
        code = run_sweep(spec.model_copy(update={"engine": engine, "jps": tuple(sorted(asked))}), options)
        if code == EXIT_INTERRUPTED:  # stopped by a signal: so is the search; a re-run resumes it
            raise SystemExit(code)
        summary = pd.read_parquet(files.summary)
        table, _ = verdicts(summary[summary.engine == engine.value], records_of, load_policy_errors())
        by_load = {row.jps: verdict_label(row) for row in table.itertuples()}
        return {jps: by_load.get(jps, "not measured") for jps in loads}

    return judge


def main(argv: list[str] | None = None) -> int:
    p = parser(SPEC)
    p.description = __doc__.split("\n")[0]
    p.add_argument("--gpu", help="the GPU type (or cpu) to search on; same as --gpus with one type")
    p.add_argument("--jps-min", type=float, default=1.0, help="lowest load searched; default: 1")
    p.add_argument("--jps-max", type=float, default=15.0, help="highest load searched; default: 15")
    p.add_argument("--resolution", type=float, default=0.5, help="width in jobs per second of each bracket found")
    p.add_argument("--confirm", action="store_true", help="measure each bracket on real vLLM after a simulated search")
    args = p.parse_args(argv)
    if args.gpu:
        args.gpus = [args.gpu]
    return run_with_one_line_errors(lambda: _search(args))


def _search(args) -> int:
    spec, options = prepare(SPEC, args)
    if len(spec.gpus) != 1 or len(spec.policies) != 2:
        raise InputError(f"--gpu and --policies: one GPU type and two policies, got {', '.join(spec.gpus)} and "
                         f"{', '.join(spec.policies)}")  # fmt: skip
    if not 0 < args.jps_min < args.jps_max or not args.resolution > 0:
        raise InputError(f"--jps-min {args.jps_min:g} --jps-max {args.jps_max:g} --resolution {args.resolution:g}: "
                         "valid is 0 < jps-min < jps-max and a positive resolution")  # fmt: skip
    if not args.name:
        spec = spec.model_copy(update={"name": f"crossover-{spec.gpus[0]}-{'-'.join(spec.policies)}"})
    search_engine = EngineKind.VLLM if spec.engine is EngineKind.VLLM else EngineKind.SIM
    # The search's engine must be able to run the GPU type (the simulator has no CPU-engine model).
    SweepSpec.model_validate(spec.model_copy(update={"engine": search_engine}).model_dump())
    flips = bisect_flips(sweep_judge(spec, options, search_engine), args.jps_min, args.jps_max, args.resolution)
    searched = search_engine.value
    rows = [{"jps_below": a, "jps_above": b, f"{searched}_below": below, f"{searched}_above": above}
            for a, b, below, above in flips]  # fmt: skip
    if args.confirm and search_engine is EngineKind.SIM and flips:
        measured = sweep_judge(spec, options, EngineKind.VLLM)(sorted({jps for a, b, *_ in flips for jps in (a, b)}))
        for row in rows:
            row |= {"vllm_below": measured[row["jps_below"]], "vllm_above": measured[row["jps_above"]]}
    table = pd.DataFrame(rows)
    atomic_write_csv(table, SweepFiles(options.results_dir / spec.name).crossover)
    print(f"[{spec.name}] {len(flips)} change(s) of verdict between {args.jps_min:g} and {args.jps_max:g} jobs per "
          "second:")
    print(table.to_string(index=False) if len(table) else "  none: the same verdict at every load searched")
    return 0


if __name__ == "__main__":
    sys.exit(main())
