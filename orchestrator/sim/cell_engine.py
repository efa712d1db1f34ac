"""A cell's simulated engine: what the worker simulates for a cell of ``engine=sim``, and what a refit re-predicts
with another device (pure)."""

from __future__ import annotations

from orchestrator.policies.engine_setup import EngineSetup
from orchestrator.roofline.hardware import Calibration, CpuProfile, Device
from orchestrator.sim.config import sim_engine
from orchestrator.sim.engine import SimEngine
from orchestrator.sim.profile import cpu_sim_engine
from orchestrator.workload.spec import WorkloadSpec


def cell_sim_engine(setup: EngineSetup, workload: WorkloadSpec, cpu_profile: CpuProfile | None = None,
                    device: Device | None = None, calibration: Calibration | None = None) -> SimEngine:  # fmt: skip
    """The engine ``setup`` decides for a cell running ``workload``: the CPU engine as ``cpu_profile`` measured it (its
    own constants), else ``device`` (default: the setup's GPU type as the simulator knows it) with the setup's pool,
    batch limits and tensor parallelism under ``calibration`` (an engine stack's, ``sim.stacks``; default: the source
    study's)."""
    if cpu_profile is not None:
        return cpu_sim_engine(cpu_profile, setup.model, setup.policy, setup.dram_gb, workload, setup.num_kv_blocks)
    return sim_engine(
        device or Device.gpu(setup.gpu), setup.model, setup.policy, setup.dram_gb, workload, calibration=calibration,
        block_size=setup.block_size, num_kv_blocks=setup.num_kv_blocks,
        gpu_memory_utilization=setup.gpu_memory_utilization,
        max_num_batched_tokens=setup.max_num_batched_tokens, max_num_seqs=setup.max_num_seqs, tp=setup.tp,
    )  # fmt: skip
