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
``<sweep>-profile``, ``orchestrator/sweep/runtime/profiling.py``), so the search and its confirmation run here.

Every load is an ordinary cell of one sweep (``crossover-<gpu>-<a>-<b>``): tracked, resumable, and a
re-run after a kill finds the same loads done and runs only the rest. The flips are printed and written
to ``DIR/<sweep>/crossover.csv``; the sweep's report shows the winner at every load measured and where it
changes. The search itself is ``orchestrator/crossover/``; this script is its command line.
"""

import sys

from orchestrator.crossover.search import SearchRange, run_search, search_name
from orchestrator.gpus import CPU
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.sweep.cli import parser, prepare, run_with_one_line_errors
from orchestrator.sweep.planning.spec import EngineKind, SweepSpec
from orchestrator.validation import InputError
from orchestrator.workload.spec import WorkloadSpec
from sweeps.cpu_tiny import SPEC as CPU_TINY

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


def main(argv: list[str] | None = None) -> int:
    p = parser(SPEC)
    p.description = __doc__.split("\n")[0]
    search_flags(p, SearchRange(1.0, 15.0, 0.5), confirm="measure each bracket on real vLLM after a simulated "
                 "search, and locate the measured change where it lies elsewhere")
    args = p.parse_args(argv)
    if args.gpu:
        args.gpus = [args.gpu]
    return run_with_one_line_errors(lambda: _search(args))


def _search(args) -> int:
    refuse_budget(args)
    within = SearchRange(args.jps_min, args.jps_max, args.resolution)
    # --engine says where the search runs, not the sweep's engine: the CPU engine's sweep is checked as the real
    # one it is (the simulator can run it only once it is profiled).
    engine = EngineKind.VLLM if args.engine == EngineKind.VLLM.value else EngineKind.SIM
    spec, options = prepare(CPU_SPEC if args.gpus == [CPU] else SPEC, vars_without(args, "engine"))
    if not args.name:
        spec = spec.model_copy(update={"name": search_name(spec)})
    return run_search(spec, options, engine, within, args.confirm)


def refuse_budget(args) -> None:
    """A search spends real time only through ``--confirm``: ``--gpu-budget`` (from the sweeps' shared flags) is for
    grid sweeps."""
    if args.gpu_budget:
        raise InputError(f"--gpu-budget {args.gpu_budget}: a search spends real time through --confirm, a few cells "
                         "per answer; valid on grid sweeps (sweeps/large_dram.py, sweeps/cpu_tiny.py, ...)")


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
