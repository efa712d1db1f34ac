"""A cell's simulated engine: what the worker simulates for a cell of ``engine=sim``, and what a refit re-predicts
with another device (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.sim.config import sim_engine
from orchestrator.sim.engine import SimEngine
from orchestrator.sim.hardware import Device
from orchestrator.sim.profile import cpu_sim_engine

if TYPE_CHECKING:
    from orchestrator.sweep.planning.cells import CellSpec


def cell_sim_engine(cell: CellSpec, device: Device | None = None) -> SimEngine:
    """The engine of ``cell``: the CPU engine as its profile measured it, else ``device`` (default: the cell's GPU type
    as the simulator knows it) with the cell's pool, batch limits and tensor parallelism."""
    options, workload = cell.engine_options, cell.workload
    if cell.cpu_profile is not None:
        return cpu_sim_engine(cell.cpu_profile, cell.model, cell.policy, cell.dram_gb, workload, options.num_kv_blocks)
    return sim_engine(
        device or Device.gpu(cell.gpu), cell.model, cell.policy, cell.dram_gb, workload,
        block_size=options.block_size_on(cell.gpu), num_kv_blocks=options.num_kv_blocks,
        gpu_memory_utilization=options.gpu_memory_utilization,
        max_num_batched_tokens=options.max_num_batched_tokens, max_num_seqs=options.max_num_seqs, tp=cell.tp,
    )  # fmt: skip
