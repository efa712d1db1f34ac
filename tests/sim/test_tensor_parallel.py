"""Tensor parallelism in the cost model: a replica of N GPUs splits each step's GEMMs, weights and KV reads over its
ranks and pays two ring all-reduces a layer; its KV pool is every rank's memory less one copy of the weights; its CPU
tier copies over N host links."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.models.arch import load_model
from orchestrator.roofline.hardware import Calibration, Device, StepCost, allreduce_s, gpu_kv_blocks
from orchestrator.sizing.kv import kv_bytes_per_token, weight_bytes

LLAMA_70B = load_model("meta-llama/Llama-3.1-70B-Instruct")
LLAMA_8B = load_model("llama-3.1-8b-instruct")
DECODE_BYTES = 8 * 8192 * 2  # a decode step of 8 sequences of the 70B: its activations in BF16


def test_four_ranks_take_a_quarter_of_the_roofline_plus_two_all_reduces_a_layer():
    calibration = Calibration.load()
    one, four = (StepCost(LLAMA_70B, Device.gpu("H200"), calibration, tp=tp) for tp in (1, 4))
    fixed = calibration.step_overhead_s + calibration.seq_overhead_s * 8
    for tokens, pairs, context in ((8, 8_000.0, 8_000), (2_048, 2_048 * 1_024.5, 2_048)):  # a decode, a prefill chunk
        roofline_one = one.forward_s(tokens, pairs, context, 8) - fixed
        roofline_four = four.forward_s(tokens, pairs, context, 8) - fixed - four.allreduces_s(tokens)
        assert roofline_four == pytest.approx(roofline_one / 4, rel=1e-12)
    assert four.allreduces_s(8) == pytest.approx(2 * 80 * allreduce_s(Device.gpu("H200"), 4, DECODE_BYTES))
    assert one.allreduces_s(8) == 0.0


def test_an_all_reduce_costs_its_latency_then_grows_with_the_ranks_and_the_bytes():
    h100 = Device.gpu("H100")
    assert allreduce_s(h100, 1, DECODE_BYTES) == 0.0
    assert allreduce_s(h100, 4, 0) == h100.allreduce_latency_s
    by_ranks = [allreduce_s(h100, tp, DECODE_BYTES) for tp in (2, 4, 8)]
    assert by_ranks == sorted(by_ranks) and len(set(by_ranks)) == 3
    ring = 2 * 3 / 4  # each of 4 ranks sends and receives 3/4 of the bytes
    assert allreduce_s(h100, 4, 64 * DECODE_BYTES) - allreduce_s(h100, 4, DECODE_BYTES) == pytest.approx(
        ring * 63 * DECODE_BYTES / h100.allreduce_bus_bytes_s)
    assert allreduce_s(h100, 4, DECODE_BYTES) < allreduce_s(Device.gpu("L40S"), 4, DECODE_BYTES) / 3  # NVLink, PCIe


def test_a_replicas_kv_pool_is_every_ranks_memory_less_one_copy_of_the_weights():
    one, four = (gpu_kv_blocks(LLAMA_8B, "H200", 0.9, tp=tp) for tp in (1, 4))
    block_bytes = 16 * kv_bytes_per_token(LLAMA_8B, 2)
    assert four > 4 * one
    assert four - 4 * one == pytest.approx(3 * weight_bytes(LLAMA_8B) / block_bytes, abs=4)  # rounding, per rank
    assert gpu_kv_blocks(LLAMA_70B, "H100", 0.9) == 0 < gpu_kv_blocks(LLAMA_70B, "H100", 0.9, tp=4)


def test_each_rank_copies_its_share_over_its_own_host_link():
    one, four = (StepCost(LLAMA_70B, Device.gpu("H100"), Calibration.load(), tp=tp) for tp in (1, 4))
    assert four.kv_bytes_per_token == one.kv_bytes_per_token  # 8 KV heads split over 4 ranks: nothing replicated
    assert four.copy_s(4_096) == pytest.approx(one.copy_s(4_096) / 4)
    sixteen = StepCost(LLAMA_70B, Device.gpu("H100"), Calibration.load(), tp=16)
    assert sixteen.kv_bytes_per_token == 2 * one.kv_bytes_per_token  # past 8 ranks each holds a whole KV head


def test_tensor_parallelism_needs_an_interconnect_and_the_models_hidden_size():
    cpu = Device("cpu", 1e12, 1e11, 1e10, 2048, 128)
    with pytest.raises(ValueError, match="all-reduces over an interconnect; cpu has none"):
        StepCost(LLAMA_8B, cpu, Calibration.load(), tp=2)
    with pytest.raises(ValueError, match="does not give"):
        StepCost(replace(LLAMA_8B, hidden_size=0), Device.gpu("H100"), Calibration.load(), tp=2)
    with pytest.raises(ValueError, match="at least 1"):
        StepCost(LLAMA_8B, Device.gpu("H100"), Calibration.load(), tp=0)
