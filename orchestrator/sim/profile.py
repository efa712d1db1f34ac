"""A measured engine as the simulator sees it: a roofline fitted to a real engine's step times (pure).

For hardware without datasheet figures, chiefly the CPU build of vLLM that runs here: the scheduler
trace of one real cell gives each step's duration and its features (tokens, attention pairs, context
read, batch), and a least-squares fit gives the effective FLOP/s, memory bandwidth and overheads of the
same roofline the GPUs use (``hardware.StepCost``) with efficiencies of 1. The API server's time per
request comes from matching the cell's mean request latency. ``benchmarks/sim_vs_cpu.py`` profiles one
cell this way and compares the simulator with the real engine on others.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

import pandas as pd

from orchestrator.sim.config import sim_engine
from orchestrator.sim.engine import SimResult, simulate
from orchestrator.sim.hardware import Calibration, Device, StepCost
from orchestrator.sizing.models import ModelArch
from orchestrator.workload.spec import WorkloadSpec

CPU_MAX_NUM_SEQS = 128  # vLLM's serving default on CPU


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

    def device(self) -> Device:
        return Device("cpu", self.peak_flops, self.memory_bytes_s, self.memory_bytes_s, self.max_num_batched_tokens,
                      CPU_MAX_NUM_SEQS)  # fmt: skip

    def calibration(self) -> Calibration:
        return Calibration(compute_efficiency=1.0, hbm_efficiency=1.0, step_overhead_s=self.step_overhead_s,
                           seq_overhead_s=self.seq_overhead_s, request_overhead_s=self.request_overhead_s)  # fmt: skip


def step_samples(trace: pd.DataFrame) -> pd.DataFrame:
    """Steps with their measured duration: the time to the next step while the engine stayed busy."""
    steps = trace[trace.kind == "step"].sort_values("t").reset_index(drop=True)
    steps["duration_s"] = steps.t.shift(-1) - steps.t
    busy = (steps.scheduled > 0) & (steps.running > 0) & steps.duration_s.notna()
    return steps[busy]


def fit_step_costs(steps: pd.DataFrame, arch: ModelArch) -> tuple[float, float, float, float]:
    """(FLOP/s, bytes/s, per-step s, per-request s) of the CPU roofline that best explains ``steps``."""
    from scipy.optimize import least_squares

    tokens = (steps.prefill_tokens + steps.decode_tokens).to_numpy(float)
    pairs, context = steps.attention_pairs.to_numpy(float), steps.context_tokens.to_numpy(float)
    seqs, measured = steps.scheduled.to_numpy(float), steps.duration_s.to_numpy(float)

    def predicted(x):
        device = Device("cpu", math.exp(x[0]), math.exp(x[1]), 1.0, 2048, 128)
        overheads = Calibration(1.0, 1.0, step_overhead_s=math.exp(x[2]), seq_overhead_s=math.exp(x[3]))
        cost = StepCost(arch, device, overheads)
        return [cost.forward_s(n, p, c, s) for n, p, c, s in zip(tokens, pairs, context, seqs)]

    def residuals(x):
        return (predicted(x) - measured) / 0.005

    start = [math.log(1e12), math.log(1e11), math.log(0.005), math.log(1e-4)]
    rough = least_squares(residuals, start, x_scale=1.0)
    # Then soft_l1: a step that waited on something else (a late admission, the OS) does not pull the fit.
    fit = least_squares(residuals, rough.x, loss="soft_l1", x_scale=1.0)
    return tuple(math.exp(value) for value in fit.x)  # type: ignore[return-value]


def simulate_cell(profile: CpuProfile, arch: ModelArch, policy: str, workload: WorkloadSpec) -> SimResult:
    engine = sim_engine(profile.device(), arch, policy, 0, workload, calibration=profile.calibration(),
                        block_size=profile.block_size, num_kv_blocks=profile.num_kv_blocks)  # fmt: skip
    return simulate(workload, engine)


def fit_request_overhead(profile: CpuProfile, arch: ModelArch, workload: WorkloadSpec, measured_latency_s: float) -> float:
    """The API server's per-request time that makes the profiling cell's mean request latency match."""
    low, high = 0.0, 0.5
    for _ in range(20):
        middle = (low + high) / 2
        candidate = CpuProfile(**(asdict(profile) | {"request_overhead_s": middle}))
        result = simulate_cell(candidate, arch, "fcfs", workload)
        latency = statistics.fmean(r.latency_s for r in result.requests if r.latency_s is not None)
        low, high = (middle, high) if latency < measured_latency_s else (low, middle)
    return (low + high) / 2
