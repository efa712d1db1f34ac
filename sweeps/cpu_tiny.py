"""The real CPU vLLM engine on the generated tiny model: fcfs against continuum at a low (1), a middle (3)
and a saturating (6) job rate, at a quarter of the source study's token counts, with the KV pool held to
2400 blocks of 32 tokens so that it can fill. With these defaults it runs in under 20 minutes on 2 cores,
and at 6 jobs per second FCFS loses most of its prefix hits while Continuum keeps them.

    python sweeps/cpu_tiny.py              # or: ray job submit --working-dir . -- python sweeps/cpu_tiny.py
"""

import sys
from pathlib import Path

if __name__ == "__main__":
    # The project root replaces this script's folder on the path: orchestrator becomes importable (also in
    # a Ray job's working-dir copy) and sweeps/bottleneck.py no longer shadows pandas' bottleneck package.
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from orchestrator.sweep.cli import sweep_main  # noqa: E402
from orchestrator.sweep.spec import EngineKind, EngineOptions, RunLimits, SweepSpec  # noqa: E402
from orchestrator.workload.spec import WorkloadSpec  # noqa: E402

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
