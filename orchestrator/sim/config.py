"""From a cell's description (device, model, policy, DRAM budget, engine options) to a simulated engine.

The same numbers the real engine would get: KV blocks from the sizing code at the cell's utilization,
precision and tensor parallelism (or ``num_kv_blocks`` when the options fix the pool), vLLM's batch defaults for the
GPU, the policy's ordering, pins and CPU tier, and the tier's size in tokens from the DRAM budget.
"""

from __future__ import annotations

from orchestrator.cell.sim_config import SchedulerConfig
from orchestrator.models.arch import ModelArch, load_model
from orchestrator.policies.catalog import get_policy
from orchestrator.roofline.hardware import Calibration, Device, Precision, StepCost, gpu_kv_blocks
from orchestrator.sim.engine import SimEngine
from orchestrator.sim.scheduler import SimMechanisms
from orchestrator.sizing.kv import kv_bytes_per_token
from orchestrator.units import GIB
from orchestrator.workload.spec import WorkloadSpec


def sim_engine(
    device: Device,
    model: str | ModelArch,
    policy: str,
    dram_gb: float,
    workload: WorkloadSpec,
    *,
    calibration: Calibration | None = None,
    block_size: int = 16,
    num_kv_blocks: int | None = None,
    gpu_memory_utilization: float = 0.85,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    precision: Precision = Precision(),
    tp: int = 1,
) -> SimEngine:
    """One replica of ``tp`` GPUs of ``device`` (tensor parallelism: one engine, its KV pool summed over the ranks)."""
    arch = model if isinstance(model, ModelArch) else load_model(model)
    chosen = get_policy(policy)
    if num_kv_blocks is None:
        num_kv_blocks = gpu_kv_blocks(arch, device.name, gpu_memory_utilization, block_size, precision, tp)
    mechanisms = SimMechanisms(chosen.ordering, chosen.retention, chosen.tier)
    scheduler = SchedulerConfig(
        num_blocks=num_kv_blocks,
        num_shared_blocks=workload.held_prefix_tokens() // block_size,
        max_num_batched_tokens=max_num_batched_tokens or device.default_max_num_batched_tokens,
        max_num_seqs=max_num_seqs or device.default_max_num_seqs,
        block_size=block_size,
        **mechanisms.recorded(),
        # LMCache's and vLLM's offload sizes are GiB, whatever the flag's name says; the budget is the replica's, its
        # ranks' shares of every token together.
        tier_tokens=int(chosen.tier_gib(dram_gb) * GIB / kv_bytes_per_token(arch, precision.kv_dtype_bytes, tp)),
    )
    return SimEngine(scheduler, StepCost(arch, device, calibration or Calibration.load(), precision, tp), mechanisms)
