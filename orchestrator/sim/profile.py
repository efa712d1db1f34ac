"""Measuring an engine for the simulator: a roofline fitted to a real engine's step times (pure; the result is
``hardware.CpuProfile``).

For hardware without datasheet figures, chiefly the CPU build of vLLM that runs here: the scheduler
traces of the profiling cells (three trials of one light cell) give each step's duration and its features
(tokens, attention pairs, context read, batch), and a least-squares fit gives the effective FLOP/s, memory
bandwidth and overheads of the same roofline the GPUs use (``hardware.StepCost``) with efficiencies of 1.
For a CPU the fit stays within what CPUs can do (``CPU_STEP_BOUNDS``): a term the steps do not exercise (a memory
term that never binds) would otherwise run its rate off without bound. A parameter the steps do not determine is
held at the bound where its term counts least, and the fit says so in one line per parameter (``StepBounds.notes``).
The API server's time per request comes from matching the cells' request latencies.
``benchmarks/sim_vs_cpu.py`` profiles the engine this way and compares the simulator with it on others.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import pandas as pd

from orchestrator.models.arch import ModelArch
from orchestrator.roofline.hardware import Calibration, CpuProfile, Device, StepCost
from orchestrator.sim.config import sim_engine
from orchestrator.sim.engine import SimEngine
from orchestrator.sim.loop import SimResult, simulate
from orchestrator.workload.spec import WorkloadSpec

# The profiling cells: fcfs at a light load, on a seed of its own so that no cell they predict shares its
# schedule, in three trials: on the 2 cores here the cells of the first pressure grid stepped up to 42% slower
# than the roofline of its one profiling cell predicted, scattered with no trend in load or policy.
PROFILE_POLICY, PROFILE_JPS, PROFILE_SEED, PROFILE_TRIALS = "fcfs", 2.0, 7, 3
NULL_BLOCKS = 1  # vLLM keeps one block of the pool it reports (and is asked for) out of use


def step_samples(trace: pd.DataFrame, steps_in_flight: int = 1) -> pd.DataFrame:
    """Steps with their measured duration, while the engine stayed busy. A trace stamps each step when it is
    scheduled. With one step in flight (vLLM's synchronous scheduling, the CPU engine) a step lasts until the next
    is scheduled. With two (asynchronous scheduling, vLLM's default on a GPU) step N+1 is scheduled as soon as N is
    launched and N+2 only once N's output is back, so N lasts from N+1's stamp to N+2's: on an H200 an 8K-token
    prefill's own interval was 25 ms and the next one's 200 ms. ``steps_in_flight`` is the trace's
    (``steps_in_flight_of``)."""
    steps = trace[trace.kind == "step"].sort_values("t").reset_index(drop=True)
    lag = steps_in_flight - 1
    steps["duration_s"] = steps.t.shift(-1 - lag) - steps.t.shift(-lag)
    busy = (steps.scheduled > 0) & (steps.running > 0)
    measured = busy & steps.duration_s.notna()
    for ahead in range(1, lag + 1):  # the steps whose stamps time this one must be busy too
        measured &= busy.shift(-ahead, fill_value=False)
    return steps[measured]


def steps_in_flight_of(server_argv: Sequence[str]) -> int:
    """How many steps the engine that ran ``server_argv`` keeps in flight: two under an asynchronous scheduler class
    (``replica.schedulers.async_variants``, what the policies run on a GPU), else one."""
    argv = list(server_argv)
    scheduler = argv[argv.index("--scheduler-cls") + 1] if "--scheduler-cls" in argv[:-1] else ""
    return 2 if ".async_variants." in scheduler else 1


def predicted_step_s(cost: StepCost, steps: pd.DataFrame) -> np.ndarray:
    """What ``cost`` predicts for each of ``steps`` (``step_samples`` rows), in seconds."""
    return np.array([cost.forward_s(prefill + decode, pairs, context, seqs) for prefill, decode, pairs, context, seqs
                     in zip(steps.prefill_tokens, steps.decode_tokens, steps.attention_pairs, steps.context_tokens,
                            steps.scheduled)])  # fmt: skip


def step_pace(profile: CpuProfile, arch: ModelArch, trace: pd.DataFrame) -> float:
    """How long a real engine's steps took against what ``profile`` predicts for the same steps: measured over
    predicted time, each step weighted by the requests it served (they all waited for it). 1.0 is the
    machine as profiled; 1.2 a machine 20% slower while the trace ran."""
    steps = step_samples(trace)
    predicted = predicted_step_s(StepCost(arch, profile.device(), profile.calibration()), steps)
    weights = steps.scheduled.to_numpy(float)
    return float((steps.duration_s.to_numpy(float) * weights).sum() / (predicted * weights).sum())


class StepCosts(NamedTuple):
    """The roofline's constants that a fit finds: the effective FLOP/s, memory bytes/s and overheads."""

    flops: float
    bytes_s: float
    step_s: float  # per step
    seq_s: float  # per sequence in the step


class _Constant(NamedTuple):
    name: str  # as a note names it
    unit: float  # the unit a note gives it in, in the constant's own
    unit_name: str
    least_at_upper: bool  # its term counts least at the top of its range (a rate), else at the bottom (an overhead)


_CONSTANTS = (_Constant("FLOP rate", 1e9, "GFLOP/s", True), _Constant("memory rate", 1e9, "GB/s", True),
              _Constant("per-step overhead", 1e-3, "ms", False), _Constant("per-sequence overhead", 1e-3, "ms", False))


@dataclass(frozen=True)
class StepBounds:
    """The range each constant of a fit must stay in (``lower`` <= value <= ``upper``, both positive)."""

    lower: StepCosts
    upper: StepCosts

    def notes(self, costs: StepCosts) -> tuple[str, ...]:
        """One line per constant of ``costs`` at a bound of its range: the steps did not determine it."""
        notes = []
        for value, lower, upper, constant in zip(costs, self.lower, self.upper, _CONSTANTS):
            at_lower, at_upper = (math.isclose(value, bound, rel_tol=1e-6) for bound in (lower, upper))
            if at_lower or at_upper:
                which = "lower" if at_lower else "upper"
                notes.append(f"the steps do not determine the {constant.name}: held at its {which} bound of "
                             f"{value / constant.unit:,.6g} {constant.unit_name}")  # fmt: skip
        return tuple(notes)


# The CPU engine's constants, from 2 cores of a small machine to a large two-socket server, with room on each side.
# The fitted rates are effective ones (efficiencies of 1): the 2-core development machine's profiles came out at
# 16.6 to 79 GFLOP/s, 26 GB/s and 1.9 to 3.3 ms per step (docs/simulator.md), far below its datasheet peaks.
CPU_STEP_BOUNDS = StepBounds(
    # FLOP/s: 1 GFLOP/s is a sixteenth of the slowest profile measured on 2 cores; 1 PFLOP/s is above two sockets of
    # Intel's AMX in BF16 (1,024 FLOP a cycle per core: 2 x 128 cores x 2 GHz, 0.52 PFLOP/s). Memory bytes/s: 1 GB/s
    # is a twentieth of one DDR4-2400 channel (19.2 GB/s); 4 TB/s is above the most main memory a two-socket server
    # reads (12 DDR5-8800 MRDIMM channels a socket, 1.7 TB/s; Xeon Max's HBM2e, about 2 TB/s). Per step: 10 us is
    # below what vLLM's Python scheduler spends on one, 1 s some 300 times the 3.3 ms measured on 2 cores. Per
    # sequence: 0.1 us is a few hundred cycles, 50 ms over a hundred times the 0.41 ms measured on 2 cores.
    lower=StepCosts(flops=1e9, bytes_s=1e9, step_s=1e-5, seq_s=1e-7),
    upper=StepCosts(flops=1e15, bytes_s=4e12, step_s=1.0, seq_s=0.05),
)


def fit_step_costs(steps: pd.DataFrame, arch: ModelArch, bounds: StepBounds | None = None) -> StepCosts:
    """The roofline constants that best explain ``steps`` (``step_samples`` rows), each within ``bounds`` where given
    (none: unbounded, as a GPU's fit against its datasheet). Within bounds, a constant the steps do not determine
    (moving it to the end of its range where its term counts least changes no step's prediction) is held there."""
    from scipy.optimize import least_squares

    measured = steps.duration_s.to_numpy(float)

    def residuals(x):
        device = Device("cpu", math.exp(x[0]), math.exp(x[1]), 1.0, 2048, 128)
        overheads = Calibration(1.0, 1.0, step_overhead_s=math.exp(x[2]), seq_overhead_s=math.exp(x[3]))
        return (predicted_step_s(StepCost(arch, device, overheads), steps) - measured) / 0.005

    # Plain least squares, no robust loss: requests wait for the sum of the step times, so a step slowed by
    # something outside the roofline (the API server or the OS on the same cores) is time to keep. A soft_l1
    # fit of the first pressure grid's profiling cell made that cell's engine 10% faster than it ran.
    start = np.log([1e12, 1e11, 0.005, 1e-4])
    if bounds is None:
        return StepCosts(*(math.exp(value) for value in least_squares(residuals, start, x_scale=1.0).x))
    lower, upper = np.log(bounds.lower), np.log(bounds.upper)
    x = least_squares(residuals, np.clip(start, lower + 1e-3, upper - 1e-3), bounds=(lower, upper), x_scale=1.0).x
    cost = float(np.sum(residuals(x) ** 2))
    for index, constant in enumerate(_CONSTANTS):
        held = x.copy()
        held[index] = (upper if constant.least_at_upper else lower)[index]
        if float(np.sum(residuals(held) ** 2)) <= cost * (1 + 1e-9):
            x = held
    return StepCosts(*(math.exp(value) for value in x))


def cpu_sim_engine(profile: CpuProfile, model: str | ModelArch, policy: str, dram_gb: float, workload: WorkloadSpec,
                   num_kv_blocks: int | None = None) -> SimEngine:  # fmt: skip
    """The simulated CPU engine: the measured roofline and token budget, and the measured pool unless the cell
    fixes its own (``num_kv_blocks``, as vLLM is asked for it)."""
    usable = profile.num_kv_blocks if num_kv_blocks is None else num_kv_blocks - NULL_BLOCKS
    return sim_engine(profile.device(), model, policy, dram_gb, workload, calibration=profile.calibration(),
                      block_size=profile.block_size, num_kv_blocks=usable)  # fmt: skip


def simulate_cell(profile: CpuProfile, arch: ModelArch, policy: str, workload: WorkloadSpec) -> SimResult:
    return simulate(workload, cpu_sim_engine(profile, arch, policy, 0, workload))


@dataclass(frozen=True)
class ProfilingCell:
    """What one profiling cell left: its scheduler trace, its request rows and the workload it ran."""

    scheduler_trace: pd.DataFrame
    requests: pd.DataFrame
    workload: WorkloadSpec


@dataclass(frozen=True)
class FittedProfile:
    """A profile as fitted, and one line per constant the profiling cells did not determine (``StepBounds.notes``)."""

    profile: CpuProfile
    notes: tuple[str, ...]


def profile_from_cells(cells: Sequence[ProfilingCell], num_kv_blocks: int, block_size: int,
                       arch: ModelArch) -> FittedProfile:  # fmt: skip
    """The profile of the engine that ran the profiling cells (``num_kv_blocks``: the pool vLLM reported): the
    roofline from all their step times together, within ``CPU_STEP_BOUNDS``, then the API server's time per request
    from their request latencies. Several cells average over how fast the machine happened to be while each ran."""
    steps = pd.concat([step_samples(cell.scheduler_trace) for cell in cells], ignore_index=True)
    costs = fit_step_costs(steps, arch, CPU_STEP_BOUNDS)
    budget = int((steps.prefill_tokens + steps.decode_tokens).max())
    profile = CpuProfile(*costs, 0.0, budget, num_kv_blocks - NULL_BLOCKS, block_size)
    profile = replace(profile, request_overhead_s=fit_request_overhead(profile, arch, cells))
    return FittedProfile(profile, CPU_STEP_BOUNDS.notes(costs))


def fit_request_overhead(profile: CpuProfile, arch: ModelArch, cells: Sequence[ProfilingCell]) -> float:
    """The API server's time per request: the one whose simulation of the profiling cells best matches the
    latency of their requests, request by request (mean absolute log ratio), searched on a 5 ms grid up to
    250 ms and then a 0.5 ms one around the best. The mean latency alone is not monotonic in it (an earlier
    arrival can change which requests share a batch), so it cannot be bisected."""
    measured = pd.concat([cell.requests for cell in cells]).dropna(subset=["latency_s"])
    measured = measured.set_index(["job_id", "turn"]).latency_s  # job ids carry their seed: no two cells share one

    def mismatch(overhead_s: float) -> float:
        overheads = replace(profile, request_overhead_s=overhead_s)
        simulated = pd.Series({(r.job_id, r.turn): r.latency_s for cell in cells
                               for r in simulate_cell(overheads, arch, PROFILE_POLICY, cell.workload).requests
                               if r.latency_s is not None})  # fmt: skip
        pairs = pd.concat([measured, simulated], axis=1, join="inner").to_numpy(float)
        return float(np.abs(np.log(pairs[:, 1] / pairs[:, 0])).mean())

    coarse = min(np.arange(0.0, 0.2501, 0.005), key=mismatch)
    return float(min(np.arange(max(0.0, coarse - 0.005), coarse + 0.0051, 0.0005), key=mismatch))
