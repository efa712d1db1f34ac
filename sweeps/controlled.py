"""The earlier controlled sweep: every GPU type with the same 64 GB CPU DRAM budget; fcfs, continuum
and LMCache at 1, 3, 6, 10 and 15 jobs per second; Llama-3.1-8B-Instruct, full scale."""

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
