"""What a simulated step costs: a roofline of the device plus fixed CPU overheads (pure).

A forward pass over a batch computes ``N`` new tokens, each attending to its request's context. Its two
kinds of kernels run one after the other, and each is bound by whichever is slower for it, arithmetic
or memory traffic:

    linear    = max(2 * P_active * N / F_eff,  weights / B_eff)          GEMMs: the weights once per step
    attention = max(4 * L_attn * H_q * d_head * sum_i n_i * (c_i + (n_i + 1) / 2) / F_eff,
                    b_kv * sum_i (c_i + n_i) / B_eff)                     every request reads its KV context
    t_step    = linear + attention + o_step + o_seq * batch

with ``F_eff = F * e_compute`` and ``B_eff = B_hbm * e_hbm``. So a prefill chunk is compute-bound, a
large decode batch over long contexts is bound by reading its KV, and a mixed batch pays both.

``F`` and ``B_hbm`` are datasheet figures (``orchestrator/data/gpus.toml``); ``e_compute``, ``e_hbm``,
``o_step`` and ``o_seq`` are the calibration (``calibration.toml``), shared by every GPU: they describe
the software stack (kernels, scheduler, sampler), not a particular card. A CPU tier adds PCIe copies at
the GPU's host-link bandwidth, and LMCache adds its per-step save stall (``lmcache_save_*``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path

from orchestrator.gpus import GPU_TYPES, GpuType
from orchestrator.sizing.kv import VLLM_NON_KV_OVERHEAD_GIB, kv_bytes_per_token, size, weight_bytes
from orchestrator.sizing.models import ModelArch

CALIBRATION_FILE = Path(__file__).parent / "calibration.toml"


@dataclass(frozen=True)
class Calibration:
    """The software stack's physical constants; fitted once on the H200 measurements."""

    compute_efficiency: float = 0.5  # share of dense peak FLOP/s a forward pass reaches
    hbm_efficiency: float = 0.7  # share of HBM bandwidth a forward pass reaches
    step_overhead_s: float = 0.005  # per engine step: scheduling, input preparation, sampling, outputs
    seq_overhead_s: float = 0.0001  # per request in a step
    request_overhead_s: float = 0.01  # per request in the API server: HTTP, tokenization, detokenization
    lmcache_save_step_s: float = 0.004  # LMCache's wait_for_save on a prefill step: hashing, allocation
    lmcache_save_chunk_s: float = 0.0006  # and per 256-token chunk saved (kernel and stream syncs, no DMA)

    @classmethod
    def load(cls, path: Path = CALIBRATION_FILE) -> Calibration:
        values = tomllib.loads(path.read_text()).get("calibration", {}) if path.exists() else {}
        known = {field.name for field in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"{path}: unknown calibration keys {sorted(unknown)}; known: {sorted(known)}")
        return cls(**values)

    def with_values(self, **values: float) -> Calibration:
        return replace(self, **values)


@dataclass(frozen=True)
class Device:
    """Peak figures of what runs the forward pass: a GPU from the catalogue, or a measured CPU."""

    name: str
    peak_flops: float
    memory_bytes_s: float
    host_link_bytes_s: float
    default_max_num_batched_tokens: int
    default_max_num_seqs: int

    @classmethod
    def from_gpu(cls, gpu: GpuType) -> Device:
        return cls(gpu.name, gpu.bf16_tflops * 1e12, gpu.hbm_gb_s * 1e9, gpu.pcie_gb_s * 1e9,
                   gpu.default_max_num_batched_tokens, gpu.default_max_num_seqs)  # fmt: skip

    @classmethod
    def gpu(cls, name: str) -> Device:
        if name not in GPU_TYPES:
            raise ValueError(f"no simulator profile for GPU {name!r}; known: {', '.join(GPU_TYPES)}")
        return cls.from_gpu(GPU_TYPES[name])


def gpu_kv_blocks(arch: ModelArch, gpu: str, utilization: float, block_size: int = 16) -> int:
    """KV blocks vLLM allocates for ``arch`` on one ``gpu``: the preflight's sizing."""
    sizing = size(arch, gpu, GPU_TYPES[gpu].memory_gib, utilization=utilization,
                  overhead_gib=VLLM_NON_KV_OVERHEAD_GIB, block_size=block_size)  # fmt: skip
    return sizing.gpu_kv_tokens // block_size


class StepCost:
    """The roofline of one model on one device under one calibration."""

    def __init__(self, arch: ModelArch, device: Device, calibration: Calibration):
        self.calibration = calibration
        self.kv_bytes_per_token = kv_bytes_per_token(arch, 2)
        self._flops_per_token = 2 * (arch.active_parameters or arch.num_parameters)
        self._flops_per_pair = 4 * arch.num_kv_layers * arch.num_attention_heads * arch.head_dim
        self._weight_bytes = weight_bytes(arch)
        self._flops_s = device.peak_flops * calibration.compute_efficiency
        self._bytes_s = device.memory_bytes_s * calibration.hbm_efficiency
        self._link_bytes_s = device.host_link_bytes_s

    def forward_s(self, num_tokens: int, attention_pairs: float, context_tokens: int, num_seqs: int) -> float:
        """One step: ``num_tokens`` computed, ``attention_pairs`` (query, key) products, ``context_tokens``
        of KV read, ``num_seqs`` requests."""
        linear = max(self._flops_per_token * num_tokens / self._flops_s, self._weight_bytes / self._bytes_s)
        attention = max(self._flops_per_pair * attention_pairs / self._flops_s,
                        self.kv_bytes_per_token * context_tokens / self._bytes_s)  # fmt: skip
        calibration = self.calibration
        return linear + attention + calibration.step_overhead_s + calibration.seq_overhead_s * num_seqs

    def copy_s(self, num_tokens: int) -> float:
        """Time on the host link to move ``num_tokens`` of KV one way."""
        return num_tokens * self.kv_bytes_per_token / self._link_bytes_s
