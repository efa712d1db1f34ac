"""What a policy is worth in GPUs: the highest load each policy carries within an SLO, per GPU type and DRAM budget,
the replicas a target traffic needs, and what a thousand jobs cost.

    python sweeps/capacity.py --slo jct_p90=60s [--gpus H200,H100,A100,L40S] [--policies fcfs,continuum,lmcache]
        [--dram-gb 50,400] [--jps-min 0.25 --jps-max 16] [--resolution 0.25] [--engine sim|vllm] [--confirm]
        [--traffic-jps 20 | --traffic-load 3] [--routers least-loaded,session-affinity] [--gpu-price H100=2.49,...]
        [--gpu cpu] [...every sweep flag but --jps, --load, --gpu-budget]

Per GPU type, the search bisects over load (the crossover search's machinery, ``sweeps/crossover.py``) until every
arm's change from meeting the SLO with confidence to not is bracketed to the resolution; the capacity is the
highest load met, and the next load searched, not met (missed, unsure, or a cell there failed or hung), bounds it;
a load met above that one is reported, not counted (``orchestrator/capacity/plan.py``). With
``--engine sim`` (the default) it searches in the simulator; ``--confirm`` then measures each capacity on real vLLM,
at itself and 1.25 times it, and walks to the measured capacity where they disagree. ``--traffic-jps`` (or
``--traffic-load``, a multiple of a replayed trace's own rate) sizes a fleet per policy and router: replicas at one
replica's capacity each is the first guess, and each size is checked by simulating that many replicas behind the
router at the target. ``--gpu-price`` (per GPU-hour, none built in) adds the cost of a thousand jobs and the
cheapest GPU type and policy for the traffic. ``--gpu cpu`` is the CPU engine with sweeps/cpu_tiny.py's model,
workload and pool: the simulator first measures it on this machine, so the search and its confirmation run here.

Every load is an ordinary cell of one sweep (``capacity`` by default): tracked, resumable, in the report, whose
capacity section comes first. The answers are written to ``DIR/<sweep>/capacity.csv`` and ``fleet.csv``.
"""

import argparse
import sys

from orchestrator.capacity.plan import parse_prices
from orchestrator.capacity.search import CapacityAsk, run_capacity
from orchestrator.cell.spec import EngineKind
from orchestrator.cli.sweep import parser as sweep_parser
from orchestrator.crossover.search import SearchRange
from orchestrator.inputs.validation import InputError
from orchestrator.records.slo import Slo
from orchestrator.routing.rules import RouterKind
from orchestrator.sweeps.cpu_tiny import SPEC as CPU_TINY
from orchestrator.sweeps.crossover import SEARCH_ENGINES, SEARCH_REFUSES, prepare_search, search_flags, search_main
from orchestrator.sweeps.large_dram import SPEC as SOURCE_STUDY
from orchestrator.workload.traces.schema import load_trace

# Fleets are sized behind the router an agent deployment would pick (a job's turns on one replica) and the project's
# default (the least-loaded replica), which moves turns and so loses their prefixes.
SPEC = SOURCE_STUDY.model_copy(update={"name": "capacity", "engine": EngineKind.SIM, "jps": (1.0,),
                                       "routers": (RouterKind.SESSION_AFFINITY, RouterKind.LEAST_LOADED)})
CPU_SPEC = CPU_TINY.model_copy(update={"name": "capacity-cpu", "jps": (1.0,)})


def parser() -> argparse.ArgumentParser:
    p = sweep_parser(SPEC, "capacity", __doc__, engines=SEARCH_ENGINES, hidden=SEARCH_REFUSES)
    search_flags(p, SearchRange(0.25, 16.0, 0.25), confirm="measure each simulated capacity on real vLLM at itself "
                 "and 1.25 times it, and find the measured capacity where they disagree")
    p.add_argument("--traffic-jps", type=float, help="size a fleet for this many jobs per second, per policy and router")
    p.add_argument("--traffic-load", type=float, help="with --trace: size a fleet for this multiple of the trace's "
                   "own arrival rate")
    p.add_argument("--gpu-price", help="price per GPU-hour by GPU type, e.g. H100=2.49,H200=3.80: adds the cost of a "
                   "thousand jobs (no prices are built in)")
    return p


def main(argv: list[str] | None = None) -> int:
    return search_main(parser(), _search, argv)


def _search(args) -> int:
    if not args.slo:
        raise InputError("--slo is required: the objective each capacity is found under, e.g. --slo jct_p90=60s")
    slo = Slo.parse(args.slo)
    search = prepare_search(args, SPEC, CPU_SPEC)
    prices = tuple(parse_prices(args.gpu_price, search.spec.gpus).items()) if args.gpu_price else ()
    ask = CapacityAsk(slo, search.within, args.confirm, _traffic(args, search.spec), prices)
    return run_capacity(search.spec, search.options, search.engine, ask)


def _traffic(args, spec) -> float | None:
    if args.traffic_jps is not None and args.traffic_load is not None:
        raise InputError("--traffic-jps and --traffic-load name the same target: give one")
    if args.traffic_load is not None:
        if spec.workload.trace is None:
            raise InputError("--traffic-load multiplies a trace's own arrival rate; valid only with --trace PATH")
        target = args.traffic_load * load_trace(spec.workload.trace).native_jps
    else:
        target = args.traffic_jps
    if target is not None and not target > 0:
        raise InputError(f"--traffic-jps must be a positive load, got {target:g}")
    return target


if __name__ == "__main__":
    sys.exit(main())
