"""Which KV policy with which router, on the real CPU engine: two replicas of the tiny model behind session affinity
and behind round-robin, against one replica talked to directly and one behind Ray Serve (what Serve itself adds),
for fcfs and continuum, with a KV pool of 1200 blocks per replica so that the load presses on it.

    python sweeps/routing_cpu.py --results-dir results        # about 20 minutes on 2 cores
    python benchmarks/serve_routing.py --results-dir results  # the same sweep, then its table

Each routed cell is a Ray Serve application of its own (``orchestrator/replica/serve_app.py``); both replicas share
the machine's cores, so a two-replica cell here measures routing and caching, not twice the throughput.
"""

import sys

from orchestrator.cell.spec import EngineKind
from orchestrator.cli.sweep import sweep_main
from orchestrator.routing.rules import RouterKind
from orchestrator.sweep.planning.spec import EngineOptions, RunLimits, SweepSpec
from orchestrator.workload.spec import WorkloadSpec

SPEC = SweepSpec(
    name="routing_cpu",
    engine=EngineKind.VLLM,
    gpus=("cpu",),
    policies=("fcfs", "continuum"),
    jps=(3,),
    model="tiny",
    replicas=(1, 2),
    routers=(RouterKind.SESSION_AFFINITY, RouterKind.ROUND_ROBIN),
    serve_overhead=True,
    workload=WorkloadSpec(jps=1, duration_s=20, scale=0.25, request_timeout_s=300, job_timeout_s=600),
    engine_options=EngineOptions(num_kv_blocks=1200),
    limits=RunLimits(health_timeout_s=300, hang_timeout_s=120),
)

if __name__ == "__main__":
    sys.exit(sweep_main(SPEC))
