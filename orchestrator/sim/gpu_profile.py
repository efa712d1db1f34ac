"""A GPU's rates from its own step times: the scheduler trace of real cells on that GPU becomes its matmul and memory
rates in ``gpu_rates.toml``, in the units the simulator reads.

    python -m orchestrator.sim.gpu_profile --gpu H100 CELL_DIR/scheduler_trace.parquet [...] [--write]

The steps are fitted with the roofline the simulator uses (``profile.fit_step_costs``: the effective FLOP/s and
bytes/s at efficiency 1, and the per-step and per-request overheads). The simulator's effective rate for a GPU is the
calibration's efficiency times the GPU's measured rate, scaled as the reference GPU's is
(``roofline.rates``), so the measured rate a fitted one stands for is

    measured = effective * (measured / datasheet)(reference) / efficiency

and with it written the simulator steps as the GPU's own steps did. Printed: the rates before and after, the fitted
overheads beside the calibration's (they stay the stack's), and how far the simulator's step times are from the
trace's under each (median relative error). ``python benchmarks/public_figures.py`` then shows the published figures
before and after. A cell in BF16 gives the BF16 matmul rate; the trace must come from one GPU type.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

import pandas as pd

from orchestrator.gpus import GPU_TYPES
from orchestrator.inputs.parser import command_parser
from orchestrator.models.arch import ModelArch, load_model
from orchestrator.paths import PROJECT_ROOT
from orchestrator.records.layout import CELL_CONFIG_FILE
from orchestrator.records.scheduler_trace_file import trace_file_frame
from orchestrator.roofline.hardware import Calibration, Device, StepCost
from orchestrator.roofline.rates import RATES_FILE, GpuRates
from orchestrator.sim.profile import fit_step_costs, predicted_step_s, step_samples, steps_in_flight_of

MODEL = "llama-3.1-8b-instruct"


@dataclass(frozen=True)
class GpuProfile:
    """What one GPU's steps showed, in the units of ``gpu_rates.toml``."""

    gpu: str
    matmul_bf16_tflops: float
    memory_read_gb_s: float
    step_overhead_s: float
    seq_overhead_s: float
    num_steps: int

    def rates(self) -> dict[str, float]:
        """Its measured rates, by their names in ``gpu_rates.toml``."""
        return {"matmul_bf16_tflops": self.matmul_bf16_tflops, "memory_read_gb_s": self.memory_read_gb_s}


def profile_gpu(gpu: str, steps: pd.DataFrame, arch: ModelArch, calibration: Calibration, rates: GpuRates) -> GpuProfile:
    """The measured rates that make the simulator's roofline fit ``steps`` (``profile.step_samples`` rows)."""
    flops, bytes_s, step_s, seq_s = fit_step_costs(steps, arch)
    matmul_share = rates.share(rates.reference, "matmul_bf16_tflops") or 1.0
    memory_share = rates.share(rates.reference, "memory_read_gb_s") or 1.0
    return GpuProfile(gpu, matmul_bf16_tflops=flops / 1e12 * matmul_share / calibration.compute_efficiency,
                      memory_read_gb_s=bytes_s / 1e9 * memory_share / calibration.hbm_efficiency,
                      step_overhead_s=step_s, seq_overhead_s=seq_s, num_steps=len(steps))  # fmt: skip


def step_error(steps: pd.DataFrame, arch: ModelArch, device: Device, calibration: Calibration) -> float:
    """The median relative error of the simulator's step times against the measured ones."""
    predicted = predicted_step_s(StepCost(arch, device, calibration), steps)
    return statistics.median(abs(p - m) / m for p, m in zip(predicted, steps.duration_s) if m > 0)


def write_profile(profile: GpuProfile, source: str, path: Path = RATES_FILE) -> None:
    """Replace ``profile.gpu``'s matmul and memory entries of ``path`` by the profile's (every other entry and every
    comment kept); the file is swapped in whole."""
    text = path.read_text()
    for name, value in profile.rates().items():
        table = f"[{profile.gpu}.{name}]"
        text = re.sub(rf"\n{re.escape(table)}\nvalue = [^\n]*\nsource = [^\n]*\n", "\n", text)
        text = text.rstrip("\n") + f'\n\n{table}\nvalue = {value:.6g}\nsource = "{source}"\n'
    GpuRates.load_text(text, str(path))  # what is written must read back
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def parser() -> argparse.ArgumentParser:
    p = command_parser("profile", __doc__)
    p.add_argument("traces", nargs="+", type=Path,
                   help="cells' scheduler_trace.parquet files from the GPU (or older results' JSON lines)")
    p.add_argument("--gpu", required=True, help=f"the GPU type they ran on: {', '.join(GPU_TYPES)}")
    p.add_argument("--model", default=MODEL, help="the model they served (a shipped config name or a config.json)")
    p.add_argument("--write", action="store_true", help=f"write the rates into {RATES_FILE.relative_to(PROJECT_ROOT)}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.gpu not in GPU_TYPES:
        print(f"error: unknown GPU type {args.gpu!r}; valid: {', '.join(GPU_TYPES)}", file=sys.stderr)
        return 2
    missing = [str(path) for path in args.traces if not path.is_file()]
    if missing:
        print(f"error: no trace file {', '.join(missing)}", file=sys.stderr)
        return 2
    rates = GpuRates.load()
    if args.write and args.gpu == rates.reference:
        print(f"error: --write for {args.gpu}, the reference GPU: the calibration's efficiencies are shares of its rates, "
              f"so its own steps cannot change them, and new ones would rescale every other GPU; valid: --write for "
              f"{', '.join(gpu for gpu in GPU_TYPES if gpu != rates.reference)}", file=sys.stderr)  # fmt: skip
        return 2
    arch = load_model(args.model)
    steps = pd.concat([trace_steps(path) for path in args.traces], ignore_index=True)
    if len(steps) < 20:
        print(f"error: {len(steps)} busy steps in {len(args.traces)} traces; a profile needs at least 20", file=sys.stderr)
        return 2
    cells = ", ".join(path.parent.name for path in args.traces)
    measured = measure_profile(args.gpu, steps, arch, cells)
    print(f"{args.gpu}: {measured.profile.num_steps} steps from {len(args.traces)} traces")
    print(measured.describe())
    if args.write:
        write_profile(measured.profile, measured.source)
        print(f"wrote {RATES_FILE}; now: python benchmarks/public_figures.py")
    return 0


def trace_steps(path: Path) -> pd.DataFrame:
    """``profile.step_samples`` of one cell's trace, timed for the scheduling its engine ran (read from the
    ``cell.json`` beside it: asynchronous on a GPU; synchronous where there is none)."""
    config = path.parent / CELL_CONFIG_FILE
    argv = json.loads(config.read_text()).get("server_argv") or [] if config.is_file() else []
    return step_samples(trace_file_frame(path), steps_in_flight_of(argv))


@dataclass(frozen=True)
class MeasuredProfile:
    """A GPU's profile beside what the simulator had for it, and the simulator's step-time error under each."""

    profile: GpuProfile
    source: str  # what ``write_profile`` records as the rates' source
    rates_before: dict[str, str]  # the rates gpu_rates.toml had ("(not measured)" where none)
    calibration: Calibration
    error_before: float  # median relative step-time error
    error_after: float
    reference: bool  # the GPU is the calibration's reference: its rates are what the efficiencies are shares of

    def describe(self) -> str:
        p, c = self.profile, self.calibration
        return "\n".join([
            f"  BF16 matmul   {self.rates_before['matmul_bf16_tflops']} -> {p.matmul_bf16_tflops:.1f} TFLOPS",
            f"  memory read   {self.rates_before['memory_read_gb_s']} -> {p.memory_read_gb_s:.0f} GB/s",
            f"  per step      {c.step_overhead_s * 1e3:.3g} ms (calibration) | {p.step_overhead_s * 1e3:.3g} ms fitted",
            f"  per request   {c.seq_overhead_s * 1e3:.3g} ms (calibration) | {p.seq_overhead_s * 1e3:.3g} ms fitted",
            f"  median step-time error {self.error_before:.1%} before, {self.error_after:.1%} after"
            + (" (the same by construction: the calibration's reference GPU)" if self.reference else ""),
        ])  # fmt: skip


def measure_profile(gpu: str, steps: pd.DataFrame, arch: ModelArch, cells: str) -> MeasuredProfile:
    """``gpu``'s profile from ``steps`` (``profile.step_samples`` rows of the cells named ``cells``), with the
    simulator's step-time error before and after its rates are replaced by the profile's."""
    rates, calibration = GpuRates.load(), Calibration.load()
    profile = profile_gpu(gpu, steps, arch, calibration, rates)
    source = (f"step-time profile of {profile.num_steps} steps on this GPU ({cells}), {date.today()}: "
              "python -m orchestrator.sim.gpu_profile")  # fmt: skip
    before = Device.gpu(gpu)
    after = replace(before, relative=rates.with_measured(gpu, profile.rates(), source).relative(gpu))
    return MeasuredProfile(profile, source, {name: _rate(rates, gpu, name) for name in profile.rates()}, calibration,
                           step_error(steps, arch, before, calibration), step_error(steps, arch, after, calibration),
                           reference=gpu == rates.reference)  # fmt: skip


def _rate(rates: GpuRates, gpu: str, name: str) -> str:
    measured = rates.measurement(gpu, name)
    return f"{measured.value:g}" if measured else "(not measured)"


if __name__ == "__main__":
    sys.exit(main())
