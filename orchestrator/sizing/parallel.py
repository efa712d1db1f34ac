"""Tensor-parallel degrees of a replica (pure): which ones vLLM accepts for a model, and the smallest whose KV pool
holds the longest request a cell may send.

vLLM's rules, followed exactly (vLLM 0.32):

* ``ModelConfig.verify_with_parallel_config`` (``vllm/config/model.py``) refuses a degree that does not divide the
  attention heads;
* ``QKVParallelLinear.__init__`` (``vllm/model_executor/layers/linear.py``) splits the KV heads with
  ``divide(total_num_kv_heads, tp)`` below their count and replicates them with ``divide(tp, total_num_kv_heads)``
  from it up, and ``divide`` asserts an exact division (``vllm/distributed/utils.py``). An MLA model caches one
  latent that every rank holds whole, so only its attention heads constrain the degree.

The layers a shipped config does not describe to the sizing (a hybrid's linear-attention heads, an MoE's expert
width) are not checked: vLLM says so at start.
"""

from __future__ import annotations

from orchestrator.gpus import GPU_TYPES
from orchestrator.models.arch import ModelArch
from orchestrator.sizing.kv import VLLM_NON_KV_OVERHEAD_GIB, size

TP_DEGREES = (1, 2, 4, 8)  # the GPUs of one node, in the powers of two that divide every shipped model's heads
# The predicted pool must hold a longest request with this share to spare: the tolerance the doctor holds the
# sizing's pool to against vLLM's (checks.SIZING_TOLERANCE; measured within 0.3% on an H200), since a degree that
# holds one sequence only on paper may be refused at start. Not a second whole sequence: Llama-3.1-8B on an L4 at
# U=0.85 holds 1.08 sequences of 16K, and would be given two GPUs where vLLM serves it on one.
POOL_MARGIN = 0.05


def tp_problem(arch: ModelArch, tp: int) -> str | None:
    """Why vLLM refuses ``tp`` for ``arch``, in one phrase naming the head counts and the valid degrees, or None."""
    why = _refusal(arch, tp)
    if why is None:
        return None
    valid = ", ".join(str(degree) for degree in TP_DEGREES if _refusal(arch, degree) is None)
    return f"{why}; valid degrees: {valid}"


def _refusal(arch: ModelArch, tp: int) -> str | None:
    heads, kv_heads = arch.num_attention_heads, arch.num_kv_heads
    if heads % tp:
        return f"vLLM splits the {heads} attention heads evenly over the ranks, and {tp} does not divide {heads}"
    if arch.latent_dim:
        return None
    if tp < kv_heads and kv_heads % tp:
        return f"vLLM splits the {kv_heads} KV heads evenly over the ranks, and {tp} does not divide {kv_heads}"
    if tp > kv_heads and tp % kv_heads:
        return (f"vLLM copies the {kv_heads} KV heads to the ranks past their count, which needs TP a multiple of "
                f"{kv_heads}, and {tp} is not")  # fmt: skip
    return None


def pool_holds(arch: ModelArch, gpu: str, tp: int, utilization: float, max_model_len: int, *,
               kv_dtype_bytes: float = 2, block_size: int = 16) -> bool:  # fmt: skip
    """Whether the KV pool of a replica of ``tp`` ``gpu`` GPUs (the sizing's, with the simulator's per-GPU overhead)
    holds one ``max_model_len`` sequence with ``POOL_MARGIN`` to spare."""
    return _pool_tokens(arch, gpu, tp, utilization, kv_dtype_bytes, block_size) * (1 - POOL_MARGIN) >= max_model_len


def holding_degrees(arch: ModelArch, gpu: str, utilization: float, max_model_len: int, *, kv_dtype_bytes: float = 2,
                    block_size: int = 16) -> list[int]:  # fmt: skip
    """The degrees of ``TP_DEGREES`` vLLM accepts for ``arch`` whose pool holds the longest request (``pool_holds``),
    smallest first."""
    return [tp for tp in TP_DEGREES if _refusal(arch, tp) is None and
            pool_holds(arch, gpu, tp, utilization, max_model_len, kv_dtype_bytes=kv_dtype_bytes, block_size=block_size)]


def default_tp(arch: ModelArch, gpu: str, utilization: float, max_model_len: int, *, kv_dtype_bytes: float = 2,
               block_size: int = 16) -> int:  # fmt: skip
    """The smallest of the ``holding_degrees``. Raises ``ValueError`` (one line) when none holds it."""
    holding = holding_degrees(arch, gpu, utilization, max_model_len, kv_dtype_bytes=kv_dtype_bytes, block_size=block_size)
    if holding:
        return holding[0]
    largest = max(tp for tp in TP_DEGREES if _refusal(arch, tp) is None)
    tokens = _pool_tokens(arch, gpu, largest, utilization, kv_dtype_bytes, block_size)
    raise ValueError(f"{arch.name} on {gpu} at utilization {utilization:g}: no tensor-parallel degree of "
                     f"{', '.join(map(str, TP_DEGREES))} holds a {max_model_len}-token sequence with "
                     f"{POOL_MARGIN:.0%} to spare (TP {largest} holds {tokens:,} tokens); valid: a higher utilization, "
                     "a smaller max_model_len or a larger GPU")  # fmt: skip


def _pool_tokens(arch: ModelArch, gpu: str, tp: int, utilization: float, kv_dtype_bytes: float,
                 block_size: int) -> int:  # fmt: skip
    return size(arch, gpu, GPU_TYPES[gpu].memory_gib, tp=tp, utilization=utilization,
                overhead_gib=VLLM_NON_KV_OVERHEAD_GIB, kv_dtype_bytes=kv_dtype_bytes,
                block_size=block_size).gpu_kv_tokens  # fmt: skip
