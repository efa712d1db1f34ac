"""The earlier controlled sweep: every GPU type with the same 64 GB CPU DRAM budget; fcfs, continuum
and LMCache at 1, 3, 6, 10 and 15 jobs per second; Llama-3.1-8B-Instruct, full scale."""

import sys

from orchestrator.cli.sweep import sweep_main
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.workload.spec import WorkloadSpec

SPEC = SweepSpec(
    name="controlled",
    gpus=("H200", "H100", "A100", "L40S"),
    policies=("fcfs", "continuum", "lmcache"),
    jps=(1, 3, 6, 10, 15),
    dram_gb=(64,),
    model=LLAMA_8B,
    workload=WorkloadSpec(jps=1, duration_s=45),
)

if __name__ == "__main__":
    sys.exit(sweep_main(SPEC))
