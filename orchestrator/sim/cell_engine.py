"""A cell's simulated engine: what the worker simulates for a cell of ``engine=sim``, and what a refit re-predicts
with another device (pure)."""

from __future__ import annotations

from orchestrator.sim.config import sim_engine
from orchestrator.sim.engine import SimEngine
from orchestrator.sim.hardware import Device
from orchestrator.sim.profile import cpu_sim_engine
from orchestrator.sweep.planning.cells import CellSpec
from orchestrator.sweep.planning.engine_setup import engine_setup


def cell_sim_engine(cell: CellSpec, device: Device | None = None) -> SimEngine:
    """The engine of ``cell``: the CPU engine as its profile measured it, else ``device`` (default: the cell's GPU type
    as the simulator knows it) with the cell's pool, batch limits and tensor parallelism."""
    setup, workload = engine_setup(cell), cell.workload
    if cell.cpu_profile is not None:
        return cpu_sim_engine(cell.cpu_profile, cell.model, cell.policy, setup.dram_gb, workload, setup.num_kv_blocks)
    return sim_engine(
        device or Device.gpu(setup.gpu), cell.model, cell.policy, setup.dram_gb, workload,
        block_size=setup.block_size, num_kv_blocks=setup.num_kv_blocks,
        gpu_memory_utilization=setup.gpu_memory_utilization,
        max_num_batched_tokens=setup.max_num_batched_tokens, max_num_seqs=setup.max_num_seqs, tp=setup.tp,
    )  # fmt: skip
