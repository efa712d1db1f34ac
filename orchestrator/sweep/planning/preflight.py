"""Preflight of a cell: before any GPU hour, which regime will it measure (pure, from the sizing library)?

Shown by ``--dry-run``, tagged on the cell's MLflow run, and warned about when a cell's policy has a CPU
tier that cannot matter (everything fits on the GPU) or when the live set will not fit (queueing).
Never a refusal: a queueing cell is a legitimate measurement, as long as it is known to be one.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.gpus import GPU_TYPES
from orchestrator.policies import get_policy
from orchestrator.sizing.agent import agent_working_sets
from orchestrator.sizing.kv import VLLM_NON_KV_OVERHEAD_GIB, Regime, kv_bytes_per_token, regime, size
from orchestrator.sizing.models import load_model
from orchestrator.sweep.planning.cells import CellSpec
from orchestrator.units import GIB


@dataclass(frozen=True)
class Preflight:
    regime: Regime | None
    note: str
    warn: bool


def preflight(cell: CellSpec) -> Preflight:
    if cell.gpu not in GPU_TYPES:
        return Preflight(None, f"no estimate for the {cell.gpu} device (no roofline)", False)
    try:
        arch = load_model(cell.model)
    except ValueError:
        return Preflight(None, f"no estimate: no config for model {cell.model!r}", False)
    gpu = GPU_TYPES[cell.gpu]
    options = cell.engine_options
    sets = agent_working_sets(cell.workload, arch, gpu)
    block = options.block_size_on(cell.gpu)
    if options.num_kv_blocks is not None:
        gpu_tokens = options.num_kv_blocks * block
    else:
        sizing = size(arch, cell.gpu, gpu.memory_gib, utilization=options.gpu_memory_utilization,
                      overhead_gib=VLLM_NON_KV_OVERHEAD_GIB, block_size=block)  # fmt: skip
        gpu_tokens = sizing.gpu_kv_tokens
    fit = regime(gpu_tokens, sets.live_tokens, sets.corpus_tokens)
    has_cpu_tier = get_policy(cell.policy).has_cpu_tier
    note = (f"{fit.value}: live {sets.live_tokens / 1e3:,.0f}K, corpus {sets.corpus_tokens / 1e3:,.0f}K tokens "
            f"vs GPU KV {gpu_tokens / 1e3:,.0f}K; offered load {sets.offered_load:.2f}")  # fmt: skip
    if has_cpu_tier and cell.dram_gb > 0:
        cpu_tokens = cell.dram_gb * GIB / kv_bytes_per_token(arch, 2)
        note += f"; CPU tier {cpu_tokens / 1e3:,.0f}K tokens"
    warn = (fit is Regime.FITS_ON_GPU and has_cpu_tier) or fit is Regime.QUEUEING
    return Preflight(fit, note, warn)


