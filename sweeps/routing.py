"""Which KV policy with which router: four H100 replicas of each policy behind each of the four routers, simulated
at full scale (Llama-3.1-8B-Instruct, the source study's workload), at 5 and 10 jobs per second per replica.

    python sweeps/routing.py --results-dir results
    python sweeps/routing.py --replicas 1 4 --routers session-affinity round-robin   # against one replica

The same question on the real CPU engine, each routed cell a Ray Serve application: ``sweeps/routing_cpu.py``.
"""

import sys

from orchestrator.cell.spec import EngineKind
from orchestrator.cli.sweep import sweep_main
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.routing.rules import RouterKind
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.workload.spec import WorkloadSpec

SPEC = SweepSpec(
    name="routing",
    engine=EngineKind.SIM,
    gpus=("H100",),
    policies=("fcfs", "continuum", "lmcache"),
    jps=(20, 40),
    dram_gb=(400,),
    replicas=(4,),
    routers=tuple(RouterKind),
    model=LLAMA_8B,
    workload=WorkloadSpec(jps=1, duration_s=45),
)

if __name__ == "__main__":
    sys.exit(sweep_main(SPEC))
