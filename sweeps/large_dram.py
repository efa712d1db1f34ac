"""The source study: H200 and H100 with 400 GB of CPU DRAM, A100 with 200 GB, L40S with 100 GB;
fcfs, continuum and LMCache at 1, 3, 6, 10 and 15 jobs per second; Llama-3.1-8B-Instruct, full scale.

    ray job submit --working-dir . -- python sweeps/large_dram.py --results-dir /shared/kvsweep
"""

import sys

from orchestrator.cell.spec import EngineKind
from orchestrator.cli.sweep import sweep_main
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.workload.spec import WorkloadSpec

SPEC = SweepSpec(
    name="large_dram",
    engine=EngineKind.AUTO,
    gpus=("H200", "H100", "A100", "L40S"),
    policies=("fcfs", "continuum", "lmcache"),
    jps=(1, 3, 6, 10, 15),
    dram_gb_by_gpu={"H200": (400,), "H100": (400,), "A100": (200,), "L40S": (100,)},
    model=LLAMA_8B,
    workload=WorkloadSpec(jps=1, duration_s=45),
)

if __name__ == "__main__":
    sys.exit(sweep_main(SPEC))
