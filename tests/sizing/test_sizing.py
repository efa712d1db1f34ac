"""The sizing arithmetic against the worked numbers of 'Two Equations for Forcing KV-Cache Offload' and
the source study's KV budget table."""

import json
import subprocess
import sys

import pytest

from orchestrator.gpus import GPU_TYPES
from orchestrator.models.arch import arch_from_config, estimate_parameters, load_model
from orchestrator.models.catalog import shipped_config
from orchestrator.sizing.kv import KIB, Regime, kv_bytes_per_token, size

QWEN = load_model("qwen3.6-35b-a3b")
LLAMA = load_model("llama-3.1-8b-instruct")


def test_bytes_per_token_count_only_the_layers_that_cache():
    assert kv_bytes_per_token(QWEN, 2) == 20 * KIB  # 10 of 40 layers, 2 KV heads of 256, BF16
    assert kv_bytes_per_token(QWEN, 1) == 10 * KIB  # FP8
    all_layers = arch_from_config({"num_hidden_layers": 40, "num_key_value_heads": 2, "head_dim": 256, "num_parameters": 1})
    assert kv_bytes_per_token(all_layers, 2) == 80 * KIB  # the naive count
    assert kv_bytes_per_token(LLAMA, 2) == 128 * KIB


def test_tensor_parallel_beyond_the_kv_heads_replicates_them():
    assert kv_bytes_per_token(QWEN, 2, tp=2) == 20 * KIB
    assert kv_bytes_per_token(QWEN, 2, tp=8) == 4 * 20 * KIB


def test_mla_caches_one_latent_per_layer_and_hybrid_layer_types_are_read():
    mla = arch_from_config({"num_hidden_layers": 61, "num_attention_heads": 128, "hidden_size": 7168,
                            "kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_parameters": 671e9})  # fmt: skip
    assert kv_bytes_per_token(mla, 2) == 61 * 576 * 2
    hybrid = arch_from_config({"num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 64, "num_parameters": 1,
                               "layer_types": ["linear_attention"] * 3 + ["full_attention"]})  # fmt: skip
    assert hybrid.num_kv_layers == 1


def test_the_dense_parameter_estimate_matches_llama_8b():
    assert estimate_parameters(shipped_config("llama-3.1-8b-instruct")) == pytest.approx(8.03e9, rel=0.005)
    assert estimate_parameters(shipped_config("qwen3-8b")) == pytest.approx(8.19e9, rel=0.005)  # the card's 8.2B


def test_the_shipped_counts_of_the_70b_and_the_moe_are_their_shapes():
    """The checkpoints' own counts (safetensors), which the estimate from the shapes reaches within its omissions
    (the final norm; an MoE's router and QK norms: 13M of Qwen3-30B-A3B's active 3.353B)."""
    llama = shipped_config("llama-3.1-70b-instruct")
    assert llama["num_parameters"] == 70_553_706_496 == estimate_parameters(llama) + llama["hidden_size"]
    moe = shipped_config("qwen3-30b-a3b")
    assert moe["num_parameters"] == 30_532_122_624 and estimate_parameters(moe) == pytest.approx(30.53e9, rel=0.001)
    arch = load_model("Qwen/Qwen3-30B-A3B")
    assert arch.num_parameters == 30_532_122_624 and arch.active_parameters == pytest.approx(3.353e9, rel=0.005)
    assert kv_bytes_per_token(arch, 2) == 96 * KIB and kv_bytes_per_token(load_model("llama-3.1-70b"), 2) == 320 * KIB


def test_two_h100_at_0_9_hold_about_3_8m_qwen_tokens():
    sizing = size(QWEN, "H100", GPU_TYPES["H100"].memory_gib, tp=2, utilization=0.9, overhead_gib=4)
    assert sizing.gpu_kv_tokens == pytest.approx(3.8e6, rel=0.05)


@pytest.mark.parametrize(("gpu", "tokens"), [("H100", 434e3), ("H200", 868e3)])
def test_the_source_studys_llama_budget_at_0_85(gpu, tokens):
    assert size(LLAMA, gpu, GPU_TYPES[gpu].memory_gib, utilization=0.85).gpu_kv_tokens == pytest.approx(tokens, rel=0.05)


def test_the_window_and_regime_of_the_posts_long_context_agents():
    sizing = size(QWEN, "H100", GPU_TYPES["H100"].memory_gib, tp=2, utilization=0.9, overhead_gib=4,
                  live_tokens=8 * 34_000, corpus_tokens=200 * 34_800, cpu_gib=40)  # fmt: skip
    assert sizing.corpus_tokens == 6_960_000 and sizing.u_corpus > 1  # the corpus spills at any utilization
    assert sizing.window == (pytest.approx(sizing.u_live), 0.95) and sizing.u_live < 0.9
    assert sizing.regime is Regime.OFFLOAD_WINDOW and sizing.disk_tier_active


def test_the_cli_prints_one_json_object_and_refuses_bad_input_in_one_line():
    run = [sys.executable, "-m", "orchestrator.sizing", "--model", "qwen3.6-35b-a3b", "--gpu", "H100", "--tp", "2",
           "--overhead-gib", "4", "--concurrency", "8", "--isl", "32000", "--osl", "2000", "--sessions", "200",
           "--session-tokens", "34800", "--json"]  # fmt: skip
    result = json.loads(subprocess.run(run, capture_output=True, text=True, check=True).stdout)
    assert result["kv_bytes_per_token"] == 20480 and result["gpu_kv_tokens"] == pytest.approx(3.8e6, rel=0.05)
    assert result["u_live"] < result["u_corpus"] and result["regime"] == "offload-window"
    bad = subprocess.run([*run[:6], "X100"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "unknown GPU type 'X100'" in bad.stderr
