"""Find the load at which the verdict between two policies changes, by bisection over jobs per second.

    python sweeps/crossover.py --gpu H200 --policies fcfs,continuum [--jps-min 1 --jps-max 15]
        [--resolution 0.5] [--engine sim|vllm|auto] [--confirm] [--dram-gb 400] [--trials N]
        [...every sweep flag but --jps, --load, --gpu-budget]

The search starts from a few loads spread geometrically over [jps-min, jps-max], then halves (geometrically)
every interval whose two ends got different verdicts (a winner, or a tie: analysis/verdicts.py) until it is
no wider than the resolution. With ``--engine sim`` or ``auto`` it searches in the simulator; ``--confirm``
then measures the two loads that bracket each change on real vLLM (cells of a GPU type the cluster lacks
stay pending, and say so). Where the measurement disagrees with the simulator at a side of the bracket, it
walks that way until it reads the simulated verdict, then bisects the measured change to the resolution:
``confirmed`` says whether the real engine changes between the same two verdicts, ``vllm_jps_below`` and
``vllm_jps_above`` where. ``--engine vllm`` searches on real vLLM directly. ``--gpu cpu`` is the CPU
engine: the simulator first measures it on this machine (one fcfs cell at 2 JPS, sweep
``<sweep>-profile``, ``orchestrator/sweep/runtime/profiling.py``), so the search and its confirmation run here.

Every load is an ordinary cell of one sweep (``crossover-<gpu>-<a>-<b>``): tracked, resumable, and a
re-run after a kill finds the same loads done and runs only the rest. The flips are printed and written
to ``DIR/<sweep>/crossover.csv``; the sweep's report shows the winner at every load measured and where it
changes. The search itself is ``orchestrator/crossover/``; this script is its command line.
"""

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.cell.spec import EngineKind
from orchestrator.cli.sweep import prepare, run_with_one_line_errors
from orchestrator.cli.sweep import parser as sweep_parser
from orchestrator.crossover.search import SearchRange, run_search, search_name
from orchestrator.gpus import CPU
from orchestrator.inputs.validation import InputError
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.sweep.planning.options import SweepOptions
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.sweeps.cpu_tiny import SPEC as CPU_TINY
from orchestrator.workload.spec import WorkloadSpec

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
# Where a search over load runs: --engine names that, not the sweep's engine.
SEARCH_ENGINES = {
    EngineKind.SIM.value: "the search runs in the simulator",
    EngineKind.AUTO.value: "the same as sim",
    EngineKind.VLLM.value: "the search runs on real vLLM (the cells of a GPU type the cluster lacks stay pending)",
}
# The sweeps' flags a search takes no value from, and why: it picks its own loads, and spends real time only through
# --confirm. Left out of its help, and refused when given.
SEARCH_REFUSES = {
    "jps": "the search picks its own loads between --jps-min and --jps-max",
    "load": "the search picks its own loads between --jps-min and --jps-max, in jobs per second",
    "gpu_budget": "a search spends real time through --confirm, a few cells per answer",
}


def parser() -> argparse.ArgumentParser:
    p = sweep_parser(SPEC, "crossover", __doc__, engines=SEARCH_ENGINES, hidden=SEARCH_REFUSES)
    search_flags(p, SearchRange(1.0, 15.0, 0.5), confirm="measure each bracket on real vLLM after a simulated "
                 "search, and locate the measured change where it lies elsewhere")
    return p


def main(argv: list[str] | None = None) -> int:
    return search_main(parser(), _search, argv)


def _search(args) -> int:
    search = prepare_search(args, SPEC, CPU_SPEC)
    spec = search.spec if args.name else search.spec.model_copy(update={"name": search_name(search.spec)})
    return run_search(spec, search.options, search.engine, search.within, args.confirm)


@dataclass(frozen=True)
class Search:
    """What a search over load runs: its sweep, the sweep's options, where it runs and the loads it searches."""

    spec: SweepSpec
    options: SweepOptions
    engine: EngineKind
    within: SearchRange


def search_main(search_parser: argparse.ArgumentParser, search: Callable[[argparse.Namespace], int],
                argv: list[str] | None) -> int:  # fmt: skip
    """A search's command (this one's and sweeps/capacity.py's): its flags parsed, the sweeps' flags it refuses
    refused (``search_args``), then ``search`` run, any bad input in one line."""
    args = search_parser.parse_args(argv)
    return run_with_one_line_errors(lambda: search(search_args(args)))


def prepare_search(args: argparse.Namespace, spec: SweepSpec, cpu_spec: SweepSpec) -> Search:
    """The search ``args`` ask for over ``spec``'s grid, or ``cpu_spec``'s with ``--gpu cpu``."""
    # --engine says where the search runs, not the sweep's engine: the CPU engine's sweep is checked as the real
    # one it is (the simulator can run it only once it is profiled).
    engine = EngineKind.VLLM if args.engine == EngineKind.VLLM.value else EngineKind.SIM
    within = SearchRange(args.jps_min, args.jps_max, args.resolution)  # refused before the sweep is prepared
    prepared, options = prepare(cpu_spec if args.gpus == [CPU] else spec, vars_without(args, "engine"))
    return Search(prepared, options, engine, within)


def search_args(args: argparse.Namespace) -> argparse.Namespace:
    """The parsed flags of a search (this one's or sweeps/capacity.py's) with ``--gpu`` as ``--gpus``; ``InputError``
    for a flag of the sweeps' that a search refuses (``SEARCH_REFUSES``), or ``--gpu`` beside ``--gpus``."""
    for dest, why in SEARCH_REFUSES.items():
        if (value := getattr(args, dest)) is not None:
            given = " ".join(value) if isinstance(value, list) else value
            raise InputError(f"--{dest.replace('_', '-')} {given}: {why}; valid on grid sweeps (kvsweep sweep NAME)")
    if args.gpu and args.gpus:
        raise InputError(f"--gpu {args.gpu} and --gpus {' '.join(args.gpus)} both name the GPU types searched; valid: "
                         "one of them (--gpu X is --gpus X)")  # fmt: skip
    return type(args)(**{**vars(args), "gpus": [args.gpu]}) if args.gpu else args


def search_flags(p, defaults: SearchRange, confirm: str) -> None:
    """The flags of a search over load (this one's and sweeps/capacity.py's): where, how fine, and ``--confirm``."""
    p.add_argument("--gpu", help="the GPU type to search on (same as --gpus with one type), or cpu: the CPU engine "
                   "with sweeps/cpu_tiny.py's model, workload and pool")
    p.add_argument("--jps-min", type=float, default=defaults.jps_min,
                   help=f"lowest load searched; default: {defaults.jps_min:g}")
    p.add_argument("--jps-max", type=float, default=defaults.jps_max,
                   help=f"highest load searched; default: {defaults.jps_max:g}")
    p.add_argument("--resolution", type=float, default=defaults.resolution,
                   help=f"width in jobs per second of each bracket found; default: {defaults.resolution:g}")
    p.add_argument("--confirm", action="store_true", help=confirm)


def vars_without(args, flag: str):
    """The parsed flags as if ``flag`` had not been given."""
    return type(args)(**{**vars(args), flag: None})


if __name__ == "__main__":
    sys.exit(main())
