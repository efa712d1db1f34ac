"""A cell's engine, decided once (pure): the settings every stage that starts, simulates, sizes or describes the
cell's engine reads, with the device's defaults filled in.

Below planning and the simulator, which read it (above the policies and the replica's configuration types): a real
replica gets the setup as vLLM's flags (``sweep.planning.serving``), the simulator as its engine's shape
(``sim.cell_engine``), preflight and the report as the sizing library's replica (``EngineSetup.sizing``), and the GPU
evidence run as what it reports of a cell's settings. A cell's setup is ``CellSpec.engine_setup``. The policy's own part of the engine (its scheduler, its
connector, its environment) is its mechanisms' (``orchestrator.mechanisms``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.gpus import CPU, GPU_TYPES
from orchestrator.models.arch import ModelArch
from orchestrator.policies.catalog import get_policy
from orchestrator.sizing.kv import VLLM_NON_KV_OVERHEAD_GIB, Sizing, size

CPU_BLOCK_SIZE = 32  # vLLM's CPU attention needs a multiple of 32
GPU_BLOCK_SIZE = 16


class EngineOptions(BaseModel):
    """vLLM settings shared by every cell of a sweep. ``None`` means the device's default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    block_size: int | None = Field(None, ge=16, description="16 on GPU, 32 on CPU (its attention needs x32).")
    num_kv_blocks: int | None = Field(None, ge=2, description="Fixes the KV pool (the CPU engine needs it).")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    max_model_len: int = Field(16384, ge=64)
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=16)
    enforce_eager: bool | None = Field(None, description="True on CPU (25 s faster start), False on GPU.")

    def block_size_on(self, device: str) -> int:
        return self.block_size or (CPU_BLOCK_SIZE if device == CPU else GPU_BLOCK_SIZE)

    def check_pool_holds_a_sequence(self, device: str) -> None:
        """vLLM refuses to start when the KV pool cannot hold one ``max_model_len`` sequence."""
        if self.num_kv_blocks is None:
            return
        block = self.block_size_on(device)
        if self.num_kv_blocks * block < self.max_model_len:
            raise ValueError(
                f"num_kv_blocks {self.num_kv_blocks} x block size {block} = {self.num_kv_blocks * block} tokens cannot "
                f"hold one max_model_len ({self.max_model_len}) sequence; use at least {-(-self.max_model_len // block)} "
                "blocks or a smaller max_model_len"
            )


@dataclass(frozen=True)
class EngineSetup:
    model: str
    policy: str
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

    def sizing(self, arch: ModelArch) -> Sizing:
        """The sizing library's replica of this engine (of ``arch``, on a GPU type of the catalogue): its degree,
        utilization and block size with the overhead the simulator sizes with, and its policy's CPU tier where it
        has one (lmcache-nocache's is 1 GiB whatever the budget)."""
        return size(arch, self.gpu, GPU_TYPES[self.gpu].memory_gib, tp=self.tp, utilization=self.gpu_memory_utilization,
                    overhead_gib=VLLM_NON_KV_OVERHEAD_GIB, block_size=self.block_size, cpu_gib=self.tier_gib or None)


def device_of(gpu: str) -> str:
    """The device a GPU type's replica runs on: cpu for the CPU engine, else gpu."""
    return "cpu" if gpu == CPU else "gpu"


def engine_setup(options: EngineOptions, *, model: str, policy: str, gpu: str, tp: int, dram_gb: float) -> EngineSetup:
    """The engine of a replica of ``model`` under ``policy`` on ``gpu`` (or cpu) over ``tp`` ranks with ``dram_gb`` of
    host memory for its CPU tier: ``options`` with the device's defaults filled in."""
    device = device_of(gpu)
    return EngineSetup(
        model=model,
        policy=policy,
        device=device,
        gpu=gpu,
        tp=tp,
        block_size=options.block_size_on(gpu),
        num_kv_blocks=options.num_kv_blocks,
        gpu_memory_utilization=options.gpu_memory_utilization,
        max_model_len=options.max_model_len,
        max_num_seqs=options.max_num_seqs,
        max_num_batched_tokens=options.max_num_batched_tokens,
        enforce_eager=options.enforce_eager if options.enforce_eager is not None else device == CPU,
        dram_gb=dram_gb,
        tier_gib=get_policy(policy).tier_gib(dram_gb),
    )
