"""The grid's cells (``expand``): each a ``cell.spec.CellSpec``, ordered so that cells sharing a server
configuration are neighbours."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from orchestrator.cell.spec import CellSpec, EngineKind
from orchestrator.gpus import CPU
from orchestrator.sweep.planning.spec import SweepSpec


def expand(spec: SweepSpec, has_gpu: Callable[[str], bool] | None = None) -> list[CellSpec]:
    """Every cell of the grid, ordered so that cells sharing a server configuration are neighbours
    (same GPU, policy and DRAM budget; then load and seed), which lets a worker reuse its replica.

    ``auto`` becomes real vLLM for the GPU types ``has_gpu`` says the cluster has (all, without it) and
    the simulator for the others.
    """
    cells = []
    for gpu, policy in itertools.product(spec.gpus, spec.policies):
        engine = spec.engine
        if engine is EngineKind.AUTO:
            engine = EngineKind.VLLM if has_gpu is None or has_gpu(gpu) else EngineKind.SIM
        grid = itertools.product(spec.tp_for(gpu), spec.dram_for(gpu), spec.replica_setups(), spec.jps, spec.cell_seeds())
        for tp, dram_gb, (replicas, router), jps, seed in grid:
            cells.append(
                CellSpec(
                    engine=engine,
                    gpu=gpu,
                    policy=policy,
                    dram_gb=dram_gb,
                    model=spec.model,
                    workload=spec.workload.model_copy(update={"jps": jps, "seed": seed}),
                    engine_options=spec.engine_options,
                    cpu_profile=spec.cpu_profile if engine is EngineKind.SIM and gpu == CPU else None,
                    sim_stack=spec.sim_stack if engine is EngineKind.SIM and gpu != CPU else None,
                    weights=spec.weights,
                    replicas=replicas,
                    router=router,
                    tp=tp,
                )
            )
    return cells

