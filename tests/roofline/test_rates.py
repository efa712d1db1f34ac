"""Each GPU's measured rates (gpu_rates.toml) against the calibration's GPU, and the precisions a step is costed at."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.gpus import GPU_TYPES
from orchestrator.models.arch import load_model
from orchestrator.roofline.hardware import Calibration, Device, Precision, StepCost, gpu_kv_blocks
from orchestrator.roofline.rates import GPU_RATES, GpuRates, RelativeRates

LLAMA = load_model("llama-3.1-8b-instruct")


def test_every_shipped_rate_names_its_source_and_the_reference_is_unchanged():
    assert GPU_RATES.reference == "H200"
    assert all(m.source and m.value > 0 for rates in GPU_RATES.measured.values() for m in rates.values())
    reference = GPU_RATES.relative("H200")
    assert reference.matmul_bf16 == reference.memory == 1.0


def test_a_measured_share_is_taken_over_the_reference_share_and_an_unmeasured_one_keeps_it(tmp_path):
    path = tmp_path / "rates.toml"
    path.write_text('reference = "H200"\n'
                    '[H200.matmul_bf16_tflops]\nvalue = 791.2\nsource = "a"\n'  # 80% of 989
                    '[H200.memory_read_gb_s]\nvalue = 4320\nsource = "b"\n'  # 90% of 4800
                    '[A100.matmul_bf16_tflops]\nvalue = 280.8\nsource = "c"\n'  # 90% of 312
                    '[A100.host_link_gb_s]\nvalue = 20\nsource = "d"\n')  # fmt: skip
    rates = GpuRates.load(path)
    a100 = rates.relative("A100")
    assert a100.matmul_bf16 == pytest.approx(0.9 / 0.8)
    assert a100.matmul_fp8 == a100.matmul_bf16  # no FP8 measured: the share it reaches of BF16
    assert a100.memory == 1.0  # not measured: the reference's share of its own datasheet
    assert rates.relative("L40S").matmul_bf16 == 1.0
    assert rates.host_link_gb_s("A100") == 20 and rates.host_link_gb_s("L40S") == GPU_TYPES["L40S"].pcie_gb_s


@pytest.mark.parametrize("body, problem", [
    ('reference = "H300"\n', r"reference 'H300' is not a GPU type; valid: .*H200"),
    ('reference = "H200"\n[X9.memory_read_gb_s]\nvalue = 1\nsource = "s"\n', r"\[X9\] is not a GPU type"),
    ('reference = "H200"\n[A100.flops]\nvalue = 1\nsource = "s"\n', r"\[A100.flops\] is not a measured rate; valid: "),
    ('reference = "H200"\n[A100.memory_read_gb_s]\nvalue = 1\n', r"\[A100.memory_read_gb_s\] needs a positive value and its source"),
])  # fmt: skip
def test_a_malformed_rates_file_is_one_line_naming_the_entry(tmp_path, body, problem):
    path = tmp_path / "rates.toml"
    path.write_text(body)
    with pytest.raises(ValueError, match=problem) as raised:
        GpuRates.load(path)
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)


def test_a_decode_step_reads_the_weights_at_the_measured_rate():
    calibration = Calibration.load()
    cost = StepCost(LLAMA, Device.gpu("A100"), calibration)
    datasheet = StepCost(LLAMA, replace(Device.gpu("A100"), relative=RelativeRates()), calibration)
    weights_only = cost.forward_s(1, 0, 0, 1) - calibration.step_overhead_s - calibration.seq_overhead_s
    weights_datasheet = datasheet.forward_s(1, 0, 0, 1) - calibration.step_overhead_s - calibration.seq_overhead_s
    assert weights_only == pytest.approx(weights_datasheet / GPU_RATES.relative("A100").memory)


def test_fp8_weights_halve_the_weights_read_and_run_gemms_at_the_fp8_rate_where_the_part_has_one():
    calibration = Calibration(compute_efficiency=0.5, hbm_efficiency=0.5, step_overhead_s=0.0, seq_overhead_s=0.0)
    fp8 = Precision(weights="fp8")
    for gpu in ("H100", "A100"):
        bf16_cost, fp8_cost = (StepCost(LLAMA, Device.gpu(gpu), calibration, precision) for precision in (Precision(), fp8))
        assert fp8_cost.forward_s(1, 0, 0, 1) == pytest.approx(bf16_cost.forward_s(1, 0, 0, 1) / 2)  # memory-bound
        prefill = (bf16_cost.forward_s(8192, 0, 0, 1), fp8_cost.forward_s(8192, 0, 0, 1))  # compute-bound GEMMs
        assert prefill[1] < prefill[0] if GPU_TYPES[gpu].fp8_tflops else prefill[1] == pytest.approx(prefill[0])


def test_fp8_storage_leaves_room_for_more_kv_blocks():
    bf16 = gpu_kv_blocks(LLAMA, "L40S", 0.9)
    kv_fp8 = gpu_kv_blocks(LLAMA, "L40S", 0.9, precision=Precision(kv_cache="fp8"))
    both = gpu_kv_blocks(LLAMA, "L40S", 0.9, precision=Precision(weights="fp8", kv_cache="fp8"))
    assert kv_fp8 == pytest.approx(2 * bf16, abs=1) and both > kv_fp8
