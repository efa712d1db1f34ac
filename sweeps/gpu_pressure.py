"""The pressure plan's cells as an ordinary sweep: fcfs, continuum, lmcache and native-offload on an H100 where its
KV pool overflows and a CPU tier must serve, at the load, pool and tier the sizing library chose
(``orchestrator/evidence/pressure.py``): 1.8 JPS over 10 s, 3,000 blocks of 16 tokens, a 32 GiB tier,
Llama-3.1-8B-Instruct with dummy weights. The same cells ran on an H100 through ``orchestrator.cli.evidence``
(docs/gpu-runs/2026-11-27-H100.md); here each gets a Ray slot of its GPU type, MLflow runs and the report.

    ray job submit --working-dir . -- python sweeps/gpu_pressure.py --results-dir /shared/kvsweep
    python sweeps/gpu_pressure.py --engine sim        # the simulator's prediction of the same cells

For another GPU type, ``python -m orchestrator.cli.pressure predict --gpus <type>`` prints its point; pass it with
``--gpus``, ``--jps``, ``--kv-blocks`` and ``--dram-gb``.
"""

import sys

from orchestrator.cli.sweep import sweep_main
from orchestrator.evidence.pressure import PRESSURE_POLICIES, pressure_cells, pressure_point
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.models.served import Weights
from orchestrator.sweep.planning.spec import SweepSpec

POINT = pressure_point("H100", LLAMA_8B)
CELLS = pressure_cells(POINT, PRESSURE_POLICIES, LLAMA_8B, Weights.DUMMY)

SPEC = SweepSpec(
    name="gpu_pressure",
    gpus=(POINT.gpu,),
    policies=PRESSURE_POLICIES,
    jps=(POINT.jps,),
    dram_gb=(POINT.dram_gb,),
    model=LLAMA_8B,
    weights=Weights.DUMMY,
    workload=CELLS[0].workload,
    engine_options=CELLS[0].engine_options,
)

if __name__ == "__main__":
    sys.exit(sweep_main(SPEC))
