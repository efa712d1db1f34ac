"""Tensor-parallel replicas: the degrees vLLM accepts for a model's heads, the smallest whose KV pool holds the longest
request, and what each rank of a replica holds."""

import subprocess
import sys

import pytest

from orchestrator.gpus import GPU_TYPES
from orchestrator.models.arch import arch_from_config, load_model
from orchestrator.sizing.kv import KIB, size
from orchestrator.sizing.parallel import TP_DEGREES, default_tp, pool_holds, tp_problem
from orchestrator.units import GIB

LLAMA_8B = load_model("llama-3.1-8b-instruct")
LLAMA_70B = load_model("llama-3.1-70b")
QWEN_MOE = load_model("Qwen/Qwen3-30B-A3B")


def heads(attention: int, kv: int, **extra):
    return arch_from_config({"num_hidden_layers": 2, "num_attention_heads": attention, "num_key_value_heads": kv,
                             "head_dim": 64, "num_parameters": 1, **extra})  # fmt: skip


def test_vllm_replicates_kv_heads_past_their_count_only_by_a_whole_multiple():
    # Qwen3-30B-A3B: 32 attention heads, 4 KV heads; at 8 and 16 each KV head is copied to 2 and 4 ranks.
    assert [tp_problem(QWEN_MOE, tp) for tp in (1, 2, 4, 8, 16)] == [None] * 5
    assert tp_problem(QWEN_MOE, 3) == ("vLLM splits the 32 attention heads evenly over the ranks, and 3 does not "
                                       "divide 32; valid degrees: 1, 2, 4, 8")  # fmt: skip
    three_kv = heads(24, 3)  # every degree below divides the 24 attention heads: the KV heads refuse them
    assert tp_problem(three_kv, 2) == ("vLLM splits the 3 KV heads evenly over the ranks, and 2 does not divide 3; "
                                       "valid degrees: 1")  # fmt: skip
    replicated = tp_problem(three_kv, 4)
    assert "copies the 3 KV heads" in replicated and "multiple of 3, and 4 is not" in replicated
    assert "8 is not" in tp_problem(three_kv, 8)
    assert tp_problem(three_kv, 3) is tp_problem(three_kv, 6) is tp_problem(three_kv, 12) is None


def test_an_mla_latent_is_cached_whole_on_every_rank_so_only_the_attention_heads_constrain_the_degree():
    mla = heads(16, 3, kv_lora_rank=512, qk_rope_head_dim=64)
    assert tp_problem(mla, 8) is None and "16 attention heads" in tp_problem(mla, 3)


def test_every_shipped_model_takes_every_degree_of_a_node():
    for model in (LLAMA_8B, LLAMA_70B, QWEN_MOE, load_model("qwen3-8b"), load_model("qwen3.6-35b-a3b")):
        assert [tp_problem(model, tp) for tp in TP_DEGREES] == [None] * len(TP_DEGREES), model.name


@pytest.mark.parametrize("gpu", list(GPU_TYPES))
@pytest.mark.parametrize("utilization", [0.85, 0.9])
def test_llama_8b_keeps_one_gpu_per_replica_on_every_gpu_type(gpu, utilization):
    assert default_tp(LLAMA_8B, gpu, utilization, 16384) == 1


def test_the_default_degree_is_the_smallest_whose_pool_holds_the_longest_request():
    by_gpu = {gpu: (default_tp(LLAMA_70B, gpu, 0.85, 16384), default_tp(QWEN_MOE, gpu, 0.85, 16384))
              for gpu in GPU_TYPES}  # fmt: skip
    assert by_gpu == {"B200": (1, 1), "H200": (2, 1), "H100": (4, 1), "A100": (8, 2), "L40S": (4, 2), "L4": (8, 4)}
    # The 70B's 141 GB of weights fill two H100s at 0.85 (2 x (0.85 x 79.6 - 2) GiB leaves no pool); at 0.9 two hold
    # 1.6 of its 16K sequences.
    assert size(LLAMA_70B, "H100", GPU_TYPES["H100"].memory_gib, tp=2, utilization=0.85).gpu_kv_tokens == 0
    assert default_tp(LLAMA_70B, "H100", 0.9, 16384) == 2


def test_a_pool_that_holds_one_sequence_only_on_paper_is_not_enough():
    pool = size(LLAMA_8B, "L4", GPU_TYPES["L4"].memory_gib, utilization=0.85).gpu_kv_tokens
    assert pool == 17_744  # 1.08 sequences of 16K
    assert pool_holds(LLAMA_8B, "L4", 1, 0.85, 16384)
    assert not pool_holds(LLAMA_8B, "L4", 1, 0.85, pool)  # no margin left for the sizing's error
    assert default_tp(LLAMA_8B, "L4", 0.85, pool) == 2


def test_no_degree_of_a_node_is_one_line_naming_the_largest_pool():
    with pytest.raises(ValueError) as none:
        default_tp(LLAMA_70B, "L4", 0.85, 32768)
    assert "\n" not in str(none.value) and "TP 8 holds 18,288 tokens" in str(none.value)
    assert "no tensor-parallel degree of 1, 2, 4, 8 holds a 32768-token sequence" in str(none.value)


def test_each_rank_holds_its_share_of_the_weights_and_of_every_tokens_kv():
    sizing = size(LLAMA_70B, "H100", GPU_TYPES["H100"].memory_gib, tp=4, utilization=0.85, cpu_gib=400)
    assert sizing.rank_weight_bytes == sizing.weight_bytes / 4 == pytest.approx(35.3e9, rel=0.001)
    assert sizing.rank_kv_bytes * 4 == sizing.gpu_kv_bytes and sizing.rank_kv_bytes_per_token == 80 * KIB
    assert sizing.rank_kv_tokens == sizing.gpu_kv_tokens  # every token, a quarter of its heads
    assert sizing.rank_cpu_kv_bytes == 100 * GIB and sizing.cpu_kv_tokens == 400 * GIB // (320 * KIB)
    # Past its 4 KV heads, a Qwen3-30B-A3B rank at TP 8 holds one whole head per layer, not half of one.
    assert size(QWEN_MOE, "H100", GPU_TYPES["H100"].memory_gib, tp=8).rank_kv_bytes_per_token == 2 * 48 * 128 * 2


def run_cli(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "orchestrator.sizing", *args]
    return subprocess.run(command, check=False, capture_output=True, text=True)


def test_the_cli_prints_what_each_rank_holds_and_refuses_a_degree_vllm_refuses():
    lines = run_cli("--model", "llama-3.1-70b", "--gpu", "H100", "--tp", "4", "--utilization", "0.85",
                    "--cpu-gib", "400").stdout.splitlines()  # fmt: skip
    assert lines[0].startswith("llama-3.1-70b-instruct on 4 x H100 at U=0.85: 320 KiB of KV per token")
    assert lines[2] == ("each of the 4 ranks: weights 35.3 GB, KV 32.8 GiB (80 KiB per token: its share of the heads "
                        "of all 429,984 tokens), CPU tier 100.0 GiB")  # fmt: skip
    one = run_cli("--model", "llama-3.1-8b-instruct", "--gpu", "H100", "--utilization", "0.85", "--cpu-gib", "400")
    assert len(one.stdout.splitlines()) == 2 and "ranks" not in one.stdout  # a single GPU: no per-rank line
    bad = run_cli("--model", "llama-3.1-70b", "--gpu", "H100", "--tp", "3")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "--tp 3 for llama-3.1-70b-instruct: vLLM splits the 64 attention heads" in bad.stderr
    assert "valid degrees: 1, 2, 4, 8" in bad.stderr
