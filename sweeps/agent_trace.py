"""Agent traces replayed on every GPU: H200, H100, A100 and L40S with the source study's DRAM budgets; fcfs,
both Continuums, LMCache and vLLM's native offload; the trace at 0.5, 1, 2 and 4 times its own arrival rate
(the JPS column of the results is that rate); Llama-3.1-8B-Instruct at full scale.

    ray job submit --working-dir . -- python sweeps/agent_trace.py --results-dir /shared/kvsweep
    python sweeps/agent_trace.py --trace my_agent.jsonl [--load 1,2,8]   # your own trace (docs/workloads.md)

By default it replays the small trace the project ships (``orchestrator/data/traces/agent-small-v1.jsonl``,
24 jobs); ``--trace`` replaces it and keeps the load multipliers. Tool times and token counts replay as
recorded; only the arrivals are rescaled.
"""

import sys

from orchestrator.cell.spec import EngineKind
from orchestrator.cli.sweep import sweep_main
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.traces.generate import SHIPPED
from orchestrator.workload.traces.schema import TraceRef, load_trace

LOADS = (0.5, 1, 2, 4)
TRACE = TraceRef.of(SHIPPED)

SPEC = SweepSpec(
    name="agent_trace",
    engine=EngineKind.AUTO,
    gpus=("H200", "H100", "A100", "L40S"),
    policies=("fcfs", "continuum", "continuum-adaptive", "lmcache", "native-offload"),
    jps=tuple(round(load * load_trace(TRACE).native_jps, 6) for load in LOADS),
    dram_gb_by_gpu={"H200": (400,), "H100": (400,), "A100": (200,), "L40S": (100,)},
    model=LLAMA_8B,
    # The window only cuts arrivals: a day is the whole of any trace that fits in a cell.
    workload=WorkloadSpec(jps=1, duration_s=86_400, trace=TRACE),
)

if __name__ == "__main__":
    sys.exit(sweep_main(SPEC))
