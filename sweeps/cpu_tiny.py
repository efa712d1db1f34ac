"""The real CPU vLLM engine on the generated tiny model: fcfs against continuum at a low (1), a middle (4) and a
pressure job rate, at a quarter of the source study's token counts, with the KV pool held to 1200 blocks of 32
tokens. The pressure rate is the lowest at which the contexts that tool calls alone keep alive exceed the pool
(``sizing.agent.pressure_jps``: 8 JPS), so its cells are under KV pressure on any machine, however fast: FCFS loses
most of its prefix hits there while Continuum keeps them. Where the middle rate sits moves with the machine's speed
(on 2 cores it is under pressure too); the report says which regime each cell measured. With these defaults it runs
in about 10 minutes on 2 cores.

    python sweeps/cpu_tiny.py              # or: ray job submit --working-dir . -- python sweeps/cpu_tiny.py
"""

import sys

from orchestrator.cell.spec import EngineKind
from orchestrator.cli.sweep import sweep_main
from orchestrator.sizing.agent import pressure_jps
from orchestrator.sweep.planning.spec import EngineOptions, RunLimits, SweepSpec
from orchestrator.workload.spec import WorkloadSpec

WORKLOAD = WorkloadSpec(jps=1, duration_s=30, scale=0.25, request_timeout_s=300, job_timeout_s=600)
ENGINE = EngineOptions(num_kv_blocks=1200)
POOL_TOKENS = (ENGINE.num_kv_blocks - 1) * ENGINE.block_size_on("cpu")  # vLLM keeps one block out of use

SPEC = SweepSpec(
    name="cpu_tiny",
    engine=EngineKind.VLLM,
    gpus=("cpu",),
    policies=("fcfs", "continuum"),
    jps=(1, 4, pressure_jps(WORKLOAD, POOL_TOKENS)),
    model="tiny",
    workload=WORKLOAD,
    engine_options=ENGINE,
    limits=RunLimits(health_timeout_s=300, hang_timeout_s=120),
)

if __name__ == "__main__":
    sys.exit(sweep_main(SPEC))
