"""The sizing arithmetic (pure), after "Two Equations for Forcing KV-Cache Offload":

    b_kv     = 2 * L_attn * H_kv * d_head * b_elem       bytes of KV per token (MLA: L * d_latent * b_elem)
    M_kv     = T * (U * V - O) - W                        KV bytes of one replica of T GPUs
    N_gpu    = M_kv / b_kv, rounded down to whole blocks   tokens of KV the replica holds
    N_live   = C * (ISL + OSL)                            what the requests running at once need
    N_corpus = S * L_session                              the prefixes worth keeping warm
    U(N)     = (N * b_kv + W + T * O) / (T * V)           utilization that holds N tokens
    window   = [U(N_live), min(U(N_corpus), 0.95)]        where offload is what a run measures
    disk     : N_corpus > N_gpu + N_cpu                   the tier below CPU sees traffic
    clock    : tau = C_tier / w >= think time + TTFT      a tier keeps blocks until they are reused

When TP exceeds the KV-head count, vLLM replicates heads, so the replica stores ``T`` heads instead of
``H_kv``; an MLA latent is stored whole on every rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from orchestrator.models.arch import ModelArch
from orchestrator.units import GIB

KIB = 2**10
KV_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
PRACTICAL_MAX_UTILIZATION = 0.95
VLLM_NON_KV_OVERHEAD_GIB = 2.0  # what vLLM keeps outside the KV pool per GPU (activations, CUDA graphs)


class Regime(str, Enum):
    FITS_ON_GPU = "fits-on-gpu"  # everything fits: an offload tier is a no-op
    OFFLOAD_WINDOW = "offload-window"  # the live set fits, the corpus spills: offload is measured
    QUEUEING = "queueing"  # the live set does not fit: the run measures queueing and preemption

    @property
    def meaning(self) -> str:
        return {
            Regime.FITS_ON_GPU: "everything fits on the GPU, so offload is a no-op",
            Regime.OFFLOAD_WINDOW: "the live set fits and the corpus spills: the run measures offload",
            Regime.QUEUEING: "the live set does not fit: the run measures queueing",
        }[self]


def kv_bytes_per_token(arch: ModelArch, kv_dtype_bytes: float, tp: int = 1) -> float:
    """KV bytes one token costs a replica of ``tp`` GPUs (all ranks together)."""
    if arch.latent_dim:
        return arch.num_kv_layers * arch.latent_dim * kv_dtype_bytes * tp
    return 2 * arch.num_kv_layers * max(arch.num_kv_heads, tp) * arch.head_dim * kv_dtype_bytes


def weight_bytes(arch: ModelArch) -> float:
    return arch.num_parameters * arch.weight_dtype_bytes


def replica_kv_bytes(gpu_gib: float, utilization: float, overhead_gib: float, weights: float, tp: int = 1) -> float:
    """KV memory of one replica: what ``utilization`` of its GPUs leaves after overhead and weights."""
    return max(0.0, tp * (utilization * gpu_gib - overhead_gib) * GIB - weights)


def kv_tokens(kv_bytes: float, bytes_per_token: float, block_size: int = 16) -> int:
    blocks = math.floor(kv_bytes / bytes_per_token / block_size)
    return blocks * block_size


def utilization_for(tokens: float, bytes_per_token: float, weights: float, gpu_gib: float, overhead_gib: float,
                    tp: int = 1) -> float:  # fmt: skip
    return (tokens * bytes_per_token + weights + tp * overhead_gib * GIB) / (tp * gpu_gib * GIB)


def regime(gpu_tokens: float, live_tokens: float, corpus_tokens: float) -> Regime:
    """Where a run with ``gpu_tokens`` of KV sits (the same as comparing U with U_live and U_corpus)."""
    if corpus_tokens <= gpu_tokens:
        return Regime.FITS_ON_GPU
    if live_tokens <= gpu_tokens:
        return Regime.OFFLOAD_WINDOW
    return Regime.QUEUEING


def disk_tier_active(corpus_tokens: float, gpu_tokens: float, cpu_tokens: float) -> bool:
    return corpus_tokens > gpu_tokens + cpu_tokens


def retention_time_s(tier_bytes: float, write_bytes_per_s: float) -> float:
    """How long an LRU tier keeps a block under a steady write rate (Che's characteristic time)."""
    return math.inf if write_bytes_per_s <= 0 else tier_bytes / write_bytes_per_s


@dataclass(frozen=True)
class Sizing:
    """Everything the CLI reports for one model on one GPU type. The byte and token figures are the replica's; the
    ``rank_`` properties are what each of its ``tp`` GPUs holds."""

    model: str
    gpu: str
    tp: int
    utilization: float
    kv_bytes_per_token: float
    weight_bytes: float
    gpu_kv_bytes: float
    gpu_kv_tokens: int
    cpu_kv_tokens: int | None = None
    live_tokens: float | None = None
    corpus_tokens: float | None = None
    u_live: float | None = None
    u_corpus: float | None = None
    window: tuple[float, float] | None = None  # None: no utilization holds the live set
    regime: Regime | None = None
    disk_tier_active: bool | None = None
    cpu_kv_bytes: float | None = None  # the CPU tier's DRAM budget, the whole replica's

    # Tensor parallelism splits the weight matrices and the embeddings over the ranks (what each rank keeps whole,
    # norms, an MoE's router, KV projections copied past their head count, is tens of MB at most), and each rank
    # caches its share of the heads of every token: the replica's block count at 1/tp of the bytes per token. vLLM's
    # CPU offload takes the replica's byte budget (``cpu_bytes_to_use``) and gives each rank's worker its own pages.
    @property
    def rank_weight_bytes(self) -> float:
        return self.weight_bytes / self.tp

    @property
    def rank_kv_bytes(self) -> float:
        return self.gpu_kv_bytes / self.tp

    @property
    def rank_kv_bytes_per_token(self) -> float:
        return self.kv_bytes_per_token / self.tp

    @property
    def rank_kv_tokens(self) -> int:
        return self.gpu_kv_tokens

    @property
    def rank_cpu_kv_bytes(self) -> float | None:
        return None if self.cpu_kv_bytes is None else self.cpu_kv_bytes / self.tp

    def rank_phrase(self) -> str:
        """What each rank holds, in words: the sizing CLI's line and the preflight's note of a tensor-parallel cell."""
        cpu = f", CPU tier {self.rank_cpu_kv_bytes / GIB:.1f} GiB" if self.rank_cpu_kv_bytes is not None else ""
        return (f"each of the {self.tp} ranks: weights {self.rank_weight_bytes / 1e9:.1f} GB, KV "
                f"{self.rank_kv_bytes / GIB:.1f} GiB ({self.rank_kv_bytes_per_token / KIB:g} KiB per token: its share "
                f"of the heads of all {self.rank_kv_tokens:,} tokens){cpu}")  # fmt: skip


def size(arch: ModelArch, gpu: str, gpu_gib: float, *, tp: int = 1, utilization: float = 0.9,
         overhead_gib: float = 2.0, kv_dtype_bytes: float = 2, block_size: int = 16, live_tokens: float | None = None,
         corpus_tokens: float | None = None, cpu_gib: float | None = None) -> Sizing:  # fmt: skip
    """The whole chain for one replica; the window and regime need the working sets."""
    per_token = kv_bytes_per_token(arch, kv_dtype_bytes, tp)
    weights = weight_bytes(arch)
    kv_bytes = replica_kv_bytes(gpu_gib, utilization, overhead_gib, weights, tp)
    gpu_tokens = kv_tokens(kv_bytes, per_token, block_size)
    cpu_bytes = cpu_gib * GIB if cpu_gib is not None else None
    cpu_tokens = int(cpu_bytes / per_token) if cpu_bytes is not None else None
    u_live = u_corpus = window = fit = disk = None
    if live_tokens is not None:
        u_live = utilization_for(live_tokens, per_token, weights, gpu_gib, overhead_gib, tp)
    if corpus_tokens is not None:
        u_corpus = utilization_for(corpus_tokens, per_token, weights, gpu_gib, overhead_gib, tp)
        disk = disk_tier_active(corpus_tokens, gpu_tokens, cpu_tokens or 0)
    if u_live is not None and u_corpus is not None:
        window = (u_live, min(u_corpus, PRACTICAL_MAX_UTILIZATION)) if u_live <= PRACTICAL_MAX_UTILIZATION else None
        fit = regime(gpu_tokens, live_tokens, corpus_tokens)
    return Sizing(arch.name, gpu, tp, utilization, per_token, weights, kv_bytes, gpu_tokens, cpu_tokens, live_tokens,
                  corpus_tokens, u_live, u_corpus, window, fit, disk, cpu_bytes)  # fmt: skip
