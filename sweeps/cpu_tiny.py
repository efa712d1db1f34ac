"""The real CPU vLLM engine on the generated tiny model: fcfs against continuum at a low (1), a middle (3)
and a saturating (6) job rate, at a quarter of the source study's token counts, with the KV pool held to
2400 blocks of 32 tokens so that it can fill. With these defaults it runs in under 20 minutes on 2 cores,
and at 6 jobs per second FCFS loses most of its prefix hits while Continuum keeps them.

    python sweeps/cpu_tiny.py              # or: ray job submit --working-dir . -- python sweeps/cpu_tiny.py
"""

import sys

from orchestrator.sweep.cli import sweep_main
from orchestrator.sweep.planning.spec import EngineKind, EngineOptions, RunLimits, SweepSpec
from orchestrator.workload.spec import WorkloadSpec

SPEC = SweepSpec(
    name="cpu_tiny",
    engine=EngineKind.VLLM,
    gpus=("cpu",),
    policies=("fcfs", "continuum"),
    jps=(1, 3, 6),
    model="tiny",
    workload=WorkloadSpec(jps=1, duration_s=30, scale=0.25, request_timeout_s=300, job_timeout_s=600),
    engine_options=EngineOptions(num_kv_blocks=2400),
    limits=RunLimits(health_timeout_s=300, hang_timeout_s=120),
)

if __name__ == "__main__":
    sys.exit(sweep_main(SPEC))
