"""The LMCache bottleneck ablation: LMCache with its CPU tier and with a 1 GB tier (``lmcache-nocache``,
which isolates the connector's own per-step cost), against fcfs and continuum, with 64 GB of CPU DRAM
at 1, 3, 6 and 10 jobs per second. vLLM's own offload connectors run beside them for comparison.

The source study's sync-mode variants patched LMCache's installed source; they are not policies here."""

import sys
from pathlib import Path

if __name__ == "__main__":
    # The project root replaces this script's folder on the path: orchestrator becomes importable (also in
    # a Ray job's working-dir copy) and sweeps/bottleneck.py no longer shadows pandas' bottleneck package.
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from orchestrator.sweep.cli import sweep_main  # noqa: E402
from orchestrator.sweep.spec import SweepSpec  # noqa: E402
from orchestrator.workload.spec import WorkloadSpec  # noqa: E402
from sweeps.large_dram import LLAMA_8B  # noqa: E402

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
