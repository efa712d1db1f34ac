"""A GPU's step-time profile becomes its rates: the steps of a GPU whose rates are known (a simulated H100 made 25%
slower at matmuls and 10% at memory, standing in for a real GPU's trace) give those rates back, and written into the
rates file they make the simulator step as that GPU did."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pandas as pd
import pytest

from orchestrator.models.arch import load_model
from orchestrator.roofline.hardware import Calibration, Device
from orchestrator.roofline.rates import RATES_FILE, GpuRates
from orchestrator.sim import gpu_profile
from orchestrator.sim.calibrate import MEASURED_DIR
from orchestrator.sim.config import sim_engine
from orchestrator.sim.loop import simulate
from orchestrator.sim.profile import step_samples
from orchestrator.workload.spec import WorkloadSpec

LLAMA = load_model("llama-3.1-8b-instruct")


@pytest.fixture(scope="module")
def slower_h100_trace(tmp_path_factory):
    """The scheduler trace of an H100 cell on an H100 at 75% of its matmul rate and 90% of its memory rate."""
    h100 = Device.gpu("H100")
    slower = replace(h100, relative=replace(h100.relative, matmul_bf16=h100.relative.matmul_bf16 * 0.75,
                                            memory=h100.relative.memory * 0.9))  # fmt: skip
    workload = WorkloadSpec(jps=4, duration_s=20)
    result = simulate(workload, sim_engine(slower, LLAMA, "fcfs", 0, workload))
    path = tmp_path_factory.mktemp("cell") / "scheduler_trace.jsonl"
    path.write_bytes(result.scheduler_trace_bytes())
    return path, slower


def test_the_profile_gives_back_the_rates_the_steps_ran_at(slower_h100_trace):
    path, slower = slower_h100_trace
    steps = step_samples(pd.read_json(path, lines=True))
    profile = gpu_profile.profile_gpu("H100", steps, LLAMA, Calibration.load(), GpuRates.load())
    relative = GpuRates.load().with_measured("H100", profile.rates(), "a test profile").relative("H100")
    assert relative.matmul_bf16 == pytest.approx(slower.relative.matmul_bf16, rel=0.05)
    assert relative.memory == pytest.approx(slower.relative.memory, rel=0.1)
    assert gpu_profile.step_error(steps, LLAMA, replace(slower, relative=relative), Calibration.load()) < 0.02


def test_written_the_rates_replace_the_gpus_own_and_keep_every_other(slower_h100_trace, tmp_path):
    path, slower = slower_h100_trace
    rates_file = tmp_path / "gpu_rates.toml"
    shutil.copy(RATES_FILE, rates_file)
    written = gpu_profile.profile_gpu("H100", step_samples(pd.read_json(path, lines=True)), LLAMA, Calibration.load(),
                                      GpuRates.load())  # fmt: skip
    gpu_profile.write_profile(written, "a test profile", rates_file)
    before, after = GpuRates.load(), GpuRates.load(rates_file)
    assert after.measured["H100"]["matmul_bf16_tflops"].source == "a test profile"
    assert after.relative("H100").matmul_bf16 == pytest.approx(slower.relative.matmul_bf16, rel=0.05)
    assert after.measured["H100"]["matmul_fp8_tflops"] == before.measured["H100"]["matmul_fp8_tflops"]
    assert {gpu: rates for gpu, rates in after.measured.items() if gpu != "H100"} == \
        {gpu: rates for gpu, rates in before.measured.items() if gpu != "H100"}  # fmt: skip
    assert "# The source study's A100 is the 40 GB PCIe card" in rates_file.read_text()


def test_the_command_refuses_an_unknown_gpu_and_a_missing_trace_in_one_line(tmp_path, capsys):
    assert gpu_profile.main(["--gpu", "H300", str(tmp_path / "x.jsonl")]) == 2
    assert capsys.readouterr().err.strip().startswith("error: unknown GPU type 'H300'; valid: B200, H200")
    assert gpu_profile.main(["--gpu", "H100", str(tmp_path / "x.jsonl")]) == 2
    assert capsys.readouterr().err.strip() == f"error: no trace file {tmp_path / 'x.jsonl'}"


def test_the_command_prints_before_and_after(slower_h100_trace, capsys):
    path, _ = slower_h100_trace
    assert gpu_profile.main(["--gpu", "H100", str(path)]) == 0
    out = capsys.readouterr().out
    assert "BF16 matmul   792.1 -> " in out and "median step-time error" in out
    before, after = (float(part.split("%")[0]) for part in out.split("median step-time error ")[1].split(" before, "))
    assert after < 2 < before


H200_TRACES = sorted((MEASURED_DIR / "h200-vllm-0.26").glob("*/scheduler_trace.jsonl.gz"))


def test_the_h200_traces_are_read_two_steps_in_flight_and_then_few_prefills_beat_the_gpus_peak():
    """The first GPU cells (docs/gpu-runs/2026-11-26-H200.md), scheduled asynchronously. Read as one step in flight,
    21 of their 180 prefill chunks of 6K+ tokens ran faster than the H200's peak allows (an 8K chunk in 25 ms: 5
    PFLOPS on a 989-TFLOPS part); read as their cell.json says, 5 (where the pipeline was not two deep)."""
    assert len(H200_TRACES) == 2
    least_s_per_token = 2 * LLAMA.active_parameters / 989e12  # the H200's dense BF16 datasheet figure

    def too_fast(steps: pd.DataFrame) -> tuple[int, int]:
        big = steps[steps.prefill_tokens >= 6000]
        return int((big.duration_s < least_s_per_token * big.prefill_tokens).sum()), len(big)

    as_run = [too_fast(gpu_profile.trace_steps(path)) for path in H200_TRACES]
    as_one = [too_fast(step_samples(pd.read_json(path, lines=True))) for path in H200_TRACES]
    assert sum(n for _, n in as_run) == sum(n for _, n in as_one) == 180
    assert sum(bad for bad, _ in as_run) == 5 and sum(bad for bad, _ in as_one) == 21


def test_the_reference_gpus_rates_are_not_written(capsys):
    assert gpu_profile.main(["--gpu", "H200", "--write", *map(str, H200_TRACES)]) == 2
    assert capsys.readouterr().err.startswith("error: --write for H200, the reference GPU:")
    assert gpu_profile.main(["--gpu", "H200", *map(str, H200_TRACES)]) == 0
    assert "(the same by construction: the calibration's reference GPU)" in capsys.readouterr().out
