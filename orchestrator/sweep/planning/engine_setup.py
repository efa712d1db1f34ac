"""A cell's engine, decided once (pure): the settings every stage that starts, simulates, sizes or describes the
cell's engine reads, with the device's defaults filled in.

A real replica gets them as vLLM's flags (``planning.serving``), the simulator as its engine's shape
(``sim.cell_engine``), preflight and the report as the sizing library's replica (``planning.preflight``), and the
GPU evidence run as what it reports of a cell's settings. The policy's own part of the engine (its scheduler, its
connector, its environment) is its mechanisms' (``orchestrator.mechanisms``).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.gpus import CPU
from orchestrator.policies import get_policy
from orchestrator.sweep.planning.cells import CellSpec


@dataclass(frozen=True)
class EngineSetup:
    device: str  # gpu or cpu
    gpu: str  # the GPU type, or cpu
    tp: int  # the ranks one replica shards the model over
    block_size: int
    num_kv_blocks: int | None  # the pool fixed in blocks; None: sized from GPU memory at the utilization
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int | None  # None: the engine's default for the device
    max_num_batched_tokens: int | None
    enforce_eager: bool  # no torch.compile or CUDA graphs
    dram_gb: float  # the cell's DRAM budget
    tier_gib: float  # the CPU tier the policy's connector allocates from it (0: none)


def engine_setup(cell: CellSpec) -> EngineSetup:
    options = cell.engine_options
    return EngineSetup(
        device=cell.device,
        gpu=cell.gpu,
        tp=cell.tp,
        block_size=options.block_size_on(cell.gpu),
        num_kv_blocks=options.num_kv_blocks,
        gpu_memory_utilization=options.gpu_memory_utilization,
        max_model_len=options.max_model_len,
        max_num_seqs=options.max_num_seqs,
        max_num_batched_tokens=options.max_num_batched_tokens,
        enforce_eager=options.enforce_eager if options.enforce_eager is not None else cell.device == CPU,
        dram_gb=cell.dram_gb,
        tier_gib=get_policy(cell.policy).tier_gib(cell.dram_gb),
    )
