"""A GPU's step-time profile becomes its rates: the steps of a GPU whose rates are known (a simulated H100 made 25%
slower at matmuls and 10% at memory, standing in for a real GPU's trace) give those rates back, and written into the
rates file they make the simulator step as that GPU did."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pandas as pd
import pytest

from orchestrator.sim import gpu_profile
from orchestrator.sim.config import sim_engine
from orchestrator.sim.hardware import Calibration, Device
from orchestrator.sim.loop import simulate
from orchestrator.sim.profile import step_samples
from orchestrator.sim.rates import RATES_FILE, GpuRates
from orchestrator.sizing.models import load_model
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
    path.write_bytes(result.trace_bytes())
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
