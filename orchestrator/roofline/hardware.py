"""What a simulated step costs: a roofline of the device plus fixed CPU overheads (pure); which devices the simulator
has a roofline for (``check_simulable``), and the measured CPU engine's (``CpuProfile``, fitted by ``sim.profile``).

A forward pass over a batch computes ``N`` new tokens, each attending to its request's context. Its two
kinds of kernels run one after the other, and each is bound by whichever is slower for it, arithmetic
or memory traffic. A replica of ``T`` GPUs (tensor parallelism) splits both over its ranks, which run in step, and
every layer then sums its ranks' partial outputs twice (after attention and after the MLP):

    linear    = max(2 * P_active * N / (T * F_gemm),  weights / (T * B_eff))      GEMMs: each rank's weights once
    attention = max(4 * L_attn * H_q * d_head * sum_i n_i * (c_i + (n_i + 1) / 2) / (T * F_eff),
                    b_kv(T) / T * sum_i (c_i + n_i) / B_eff)                      every request reads its KV context
    allreduce = 2 * L * (a_lat + 2 * (T - 1) / T * N * d_model * 2 bytes / B_bus)  none when T = 1
    t_step    = linear + attention + allreduce + o_step + o_seq * batch

with ``F_eff = F * e_compute * r_bf16`` and ``B_eff = B_hbm * e_hbm * r_mem``. So a prefill chunk is compute-bound, a
large decode batch over long contexts is bound by reading its KV, and a mixed batch pays both. ``F_gemm`` is ``F_eff``,
or with FP8 weights on a part with FP8 tensor cores ``F_fp8 * e_compute * r_fp8`` (attention stays BF16); FP8 weights
and an FP8 KV cache halve ``weights`` and ``b_kv`` (``Precision``). ``b_kv(T)`` is the replica's KV bytes per token
(``sizing.kv``: KV heads are replicated past ``T`` = their count), of which each rank holds ``1/T``. The all-reduce is
a ring's: ``a_lat`` and ``B_bus`` are the part's measured all-reduce latency and bus bandwidth over its interconnect
(NVLink or PCIe), activations in BF16 whatever the weights.

``F``, ``F_fp8`` and ``B_hbm`` are datasheet figures and ``a_lat`` and ``B_bus`` published measurements, all in
``orchestrator/data/gpus.toml``; ``e_compute``, ``e_hbm``, ``o_step`` and ``o_seq`` are the engine stack's calibration
(``sim.stacks``: the source study's ``calibration.toml``, fitted on its H200 runs at ``T = 1``, or a stack fitted on
this project's GPU cells): they describe the software stack (kernels, scheduler, sampler). The ``r`` are the part's
measured shares of its datasheet rates against the H200's (``rates.py``, 1 where nothing was measured). A CPU tier adds copies at the GPU's measured host-link rate, each rank over its own link
(``T`` links in parallel), and a tier adds what its connector makes a step wait for (``Tier.save_stall_s``,
``Tier.step_work_s``) and what a load costs besides its bytes (``Tier.load_s``), from the stack's own constants.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Literal

from orchestrator.gpus import CPU, GPU_TYPES, GpuType
from orchestrator.models.arch import ModelArch, load_model
from orchestrator.roofline.rates import GPU_RATES, RelativeRates
from orchestrator.sizing.kv import VLLM_NON_KV_OVERHEAD_GIB, kv_bytes_per_token, size, weight_bytes

CALIBRATION_FILE = Path(__file__).parent / "calibration.toml"
ACTIVATION_BYTES = 2  # BF16: what a layer all-reduces, FP8 weights or not
CPU_MAX_NUM_SEQS = 128  # vLLM's serving default on CPU


@dataclass(frozen=True)
class Calibration:
    """One engine stack's physical constants (``sim.stacks``: the source study's, fitted on its H200 runs, or a stack
    fitted on this project's GPU cells). The connectors' costs default to 0, where a stack's fit found none or did not
    look (the source study's times LMCache's save with ``lmcache_save_*`` alone)."""

    compute_efficiency: float = 0.5  # share of dense peak FLOP/s a forward pass reaches
    hbm_efficiency: float = 0.7  # share of HBM bandwidth a forward pass reaches
    step_overhead_s: float = 0.005  # per engine step: scheduling, input preparation, sampling, outputs
    seq_overhead_s: float = 0.0001  # per request in a step
    request_overhead_s: float = 0.01  # per request in the API server: HTTP, tokenization, detokenization
    lmcache_save_step_s: float = 0.004  # LMCache's wait_for_save on a prefill step: hashing, allocation
    lmcache_save_chunk_s: float = 0.0006  # and per 256-token chunk saved (kernel and stream syncs, no DMA)
    # LMCache's work inside a step as its own log times it (``LMCacheCpuTier.step_work_s``), the step waiting for all:
    lmcache_prompt_step_s: float = 0.0  # a step that computes prompt tokens: the host's step work, no longer hidden
    lmcache_store_s: float = 0.0  # per store (a request's new full chunks after a step)
    lmcache_store_chunk_s: float = 0.0  # per 256-token chunk stored
    lmcache_retrieve_s: float = 0.0  # per retrieve (a request's prefix before its first step)
    lmcache_retrieve_chunk_s: float = 0.0  # per 256-token chunk retrieved
    native_load_job_s: float = 0.0  # native offload: each load's fixed time on its transfer queue (``NativeOffload``)
    simple_store_s: float = 0.0  # simple offload: what each request's store makes its step wait (``SimpleOffload``)

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
    """Peak figures of what runs the forward pass (a GPU from the catalogue, or a measured CPU), its measured shares of
    them against the calibration's GPU (``rates.RelativeRates``), its host link and what an all-reduce over its
    interconnect was measured to cost (none for a CPU: it runs on one device only)."""

    name: str
    peak_flops: float  # dense BF16
    memory_bytes_s: float
    host_link_bytes_s: float
    default_max_num_batched_tokens: int
    default_max_num_seqs: int
    fp8_peak_flops: float = 0.0  # dense FP8; 0 without FP8 tensor cores, where FP8 weights run in BF16 GEMMs
    relative: RelativeRates = RelativeRates()
    allreduce_latency_s: float = 0.0  # one all-reduce's fixed cost
    allreduce_bus_bytes_s: float = 0.0  # its bus bandwidth (nccl-tests' busbw); 0: no interconnect

    @classmethod
    def from_gpu(cls, gpu: GpuType) -> Device:
        return cls(gpu.name, gpu.bf16_tflops * 1e12, gpu.hbm_gb_s * 1e9, GPU_RATES.host_link_gb_s(gpu.name) * 1e9,
                   gpu.default_max_num_batched_tokens, gpu.default_max_num_seqs, gpu.fp8_tflops * 1e12,
                   GPU_RATES.relative(gpu.name), gpu.allreduce_latency_us * 1e-6,
                   gpu.allreduce_bus_gb_s * 1e9)  # fmt: skip

    @classmethod
    def gpu(cls, name: str) -> Device:
        if name not in GPU_TYPES:
            raise ValueError(f"no simulator profile for GPU {name!r}; known: {', '.join(GPU_TYPES)}")
        return cls.from_gpu(GPU_TYPES[name])


@dataclass(frozen=True)
class Precision:
    """What the weights and the KV cache are stored in. ``model``: the checkpoint's own dtype (BF16 for the shipped
    models); ``fp8``: one byte each, the weights as vLLM runs an FP8 checkpoint (W8A8: FP8 GEMMs where the part has
    FP8 tensor cores), the KV cache as ``--kv-cache-dtype fp8``."""

    weights: Literal["model", "fp8"] = "model"
    kv_cache: Literal["bf16", "fp8"] = "bf16"

    @property
    def kv_dtype_bytes(self) -> int:
        return 1 if self.kv_cache == "fp8" else 2

    def stored(self, arch: ModelArch) -> ModelArch:
        """``arch`` with its weights in this precision's bytes."""
        return replace(arch, weight_dtype_bytes=1) if self.weights == "fp8" else arch


def gpu_kv_blocks(arch: ModelArch, gpu: str, utilization: float, block_size: int = 16,
                  precision: Precision = Precision(), tp: int = 1) -> int:  # fmt: skip
    """KV blocks vLLM allocates for ``arch`` on a replica of ``tp`` GPUs of type ``gpu``: the preflight's sizing (the
    pool of every rank together, each holding its share of every block's heads)."""
    sizing = size(precision.stored(arch), gpu, GPU_TYPES[gpu].memory_gib, tp=tp, utilization=utilization,
                  overhead_gib=VLLM_NON_KV_OVERHEAD_GIB, kv_dtype_bytes=precision.kv_dtype_bytes,
                  block_size=block_size)  # fmt: skip
    return sizing.gpu_kv_tokens // block_size


def allreduce_s(device: Device, tp: int, num_bytes: float) -> float:
    """One ring all-reduce of ``num_bytes`` over ``tp`` GPUs of ``device``: its latency, then each rank sends and
    receives ``2 (tp - 1) / tp`` of the bytes at the bus bandwidth. Nothing to reduce on one GPU."""
    if tp == 1:
        return 0.0
    return device.allreduce_latency_s + 2 * (tp - 1) / tp * num_bytes / device.allreduce_bus_bytes_s


class StepCost:
    """The roofline of one model on a replica of ``tp`` GPUs of one device under one calibration, at one precision."""

    def __init__(self, arch: ModelArch, device: Device, calibration: Calibration, precision: Precision = Precision(),
                 tp: int = 1):  # fmt: skip
        if tp < 1:
            raise ValueError(f"tensor parallelism must be at least 1, not {tp}")
        if tp > 1 and not device.allreduce_bus_bytes_s:
            raise ValueError(f"tensor parallelism of {tp} all-reduces over an interconnect; {device.name} has none")
        if tp > 1 and not arch.hidden_size:
            raise ValueError(f"tensor parallelism of {tp} all-reduces activations of the hidden size, which the config "
                             f"of {arch.name} does not give")  # fmt: skip
        self.calibration = calibration
        self.tp = tp
        self.device = device
        self.kv_bytes_per_token = kv_bytes_per_token(arch, precision.kv_dtype_bytes, tp)  # the replica's, all ranks
        # Each rank's share: the ranks run in step, so a step takes what one rank's share takes. The K/V projections a
        # rank replicates past the model's KV heads are not counted (a few percent of a Llama layer's weights).
        self._flops_per_token = 2 * (arch.active_parameters or arch.num_parameters) / tp
        self._flops_per_pair = 4 * arch.num_kv_layers * arch.num_attention_heads * arch.head_dim / tp
        self._weight_bytes = weight_bytes(precision.stored(arch)) / tp
        self._kv_bytes_per_rank = self.kv_bytes_per_token / tp
        self._allreduces_per_step = 2 * arch.num_layers  # after each layer's attention and after its MLP
        self._activation_bytes_per_token = arch.hidden_size * ACTIVATION_BYTES
        relative = device.relative
        self._flops_s = device.peak_flops * calibration.compute_efficiency * relative.matmul_bf16
        self._gemm_flops_s = self._flops_s
        if precision.weights == "fp8" and device.fp8_peak_flops:
            self._gemm_flops_s = device.fp8_peak_flops * calibration.compute_efficiency * relative.matmul_fp8
        self._bytes_s = device.memory_bytes_s * calibration.hbm_efficiency * relative.memory
        self._link_bytes_s = device.host_link_bytes_s * tp  # each rank copies its share over its own PCIe link

    def forward_s(self, num_tokens: int, attention_pairs: float, context_tokens: int, num_seqs: int) -> float:
        """One step: ``num_tokens`` computed, ``attention_pairs`` (query, key) products, ``context_tokens``
        of KV read, ``num_seqs`` requests."""
        linear = max(self._flops_per_token * num_tokens / self._gemm_flops_s, self._weight_bytes / self._bytes_s)
        attention = max(self._flops_per_pair * attention_pairs / self._flops_s,
                        self._kv_bytes_per_rank * context_tokens / self._bytes_s)  # fmt: skip
        calibration = self.calibration
        return (linear + attention + self.allreduces_s(num_tokens) + calibration.step_overhead_s
                + calibration.seq_overhead_s * num_seqs)  # fmt: skip

    def allreduces_s(self, num_tokens: int) -> float:
        """The all-reduces of a step of ``num_tokens``: two per layer of the step's activations."""
        step_bytes = num_tokens * self._activation_bytes_per_token
        return self._allreduces_per_step * allreduce_s(self.device, self.tp, step_bytes)

    def copy_s(self, num_tokens: int) -> float:
        """Time on the host links to move ``num_tokens`` of KV one way."""
        return num_tokens * self.kv_bytes_per_token / self._link_bytes_s


@dataclass(frozen=True)
class CpuProfile:
    """The real CPU engine as the simulator sees it."""

    peak_flops: float
    memory_bytes_s: float
    step_overhead_s: float
    seq_overhead_s: float
    request_overhead_s: float
    max_num_batched_tokens: int
    num_kv_blocks: int
    block_size: int

    def describe(self) -> str:
        return (f"{self.peak_flops / 1e9:.3g} GFLOP/s, {self.memory_bytes_s / 1e9:.3g} GB/s, "
                f"{self.step_overhead_s * 1e3:.3g} ms per step, {self.seq_overhead_s * 1e3:.3g} ms per sequence, "
                f"{self.request_overhead_s * 1e3:.3g} ms of API time per request, "
                f"a {self.max_num_batched_tokens:,}-token budget, {self.num_kv_blocks:,} blocks of "
                f"{self.block_size} tokens")  # fmt: skip

    def at_pace(self, pace: float) -> CpuProfile:
        """The same engine on a machine whose steps take ``pace`` times as long (``step_pace``): every step
        cost scaled, the API server's time per request too (it runs on the same cores)."""
        return replace(self, peak_flops=self.peak_flops / pace, memory_bytes_s=self.memory_bytes_s / pace,
                       step_overhead_s=self.step_overhead_s * pace, seq_overhead_s=self.seq_overhead_s * pace,
                       request_overhead_s=self.request_overhead_s * pace)  # fmt: skip

    def device(self) -> Device:
        return Device("cpu", self.peak_flops, self.memory_bytes_s, self.memory_bytes_s, self.max_num_batched_tokens,
                      CPU_MAX_NUM_SEQS)  # fmt: skip

    def calibration(self) -> Calibration:
        return Calibration(compute_efficiency=1.0, hbm_efficiency=1.0, step_overhead_s=self.step_overhead_s,
                           seq_overhead_s=self.seq_overhead_s, request_overhead_s=self.request_overhead_s)  # fmt: skip


def check_simulable(model: str, gpus: Iterable[str], has_cpu_profile: bool = False) -> None:
    """Raises ``ValueError`` (one line) unless every device has a profile and the model has a config. The CPU
    engine's profile is measured on the machine that runs it (``sim/profile.py``), so it comes with the sweep."""
    for gpu in gpus:
        if gpu == CPU and not has_cpu_profile:
            raise ValueError("the simulator models the cpu device only from a profile measured on this machine: "
                             "`python sweeps/crossover.py --gpu cpu` measures one first; valid without one: "
                             f"{', '.join(GPU_TYPES)}")  # fmt: skip
        if gpu != CPU and gpu not in GPU_TYPES:
            raise ValueError(f"the simulator has no profile for the {gpu!r} device; it simulates GPUs: {', '.join(GPU_TYPES)}")
    load_model(model)
