"""The LMCache bottleneck ablation: LMCache with its CPU tier and with a 1 GB tier (``lmcache-nocache``,
which isolates the connector's own per-step cost), against fcfs and continuum, with 64 GB of CPU DRAM
at 1, 3, 6 and 10 jobs per second. vLLM's own offload connectors run beside them for comparison.

The source study's sync-mode variants patched LMCache's installed source; they are not policies here."""

import sys

from orchestrator.cli.sweep import sweep_main
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.workload.spec import WorkloadSpec

SPEC = SweepSpec(
    name="bottleneck",
    gpus=("H200", "H100", "L40S"),
    policies=("fcfs", "continuum", "lmcache", "lmcache-nocache", "native-offload", "simple-offload"),
    jps=(1, 3, 6, 10),
    dram_gb=(64,),
    model=LLAMA_8B,
    workload=WorkloadSpec(jps=1, duration_s=45),
)

if __name__ == "__main__":
    sys.exit(sweep_main(SPEC))
