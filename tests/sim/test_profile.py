"""Fitting a measured engine's roofline from its step trace recovers the constants that made the steps, stays within a
CPU's physical range where the steps do not determine a constant (and says so), and a profile fitted on a few cells
predicts the engine on others."""

import io
import math
import random
import statistics

import pandas as pd
import pytest

from orchestrator.models.arch import load_model
from orchestrator.records.schema import to_row
from orchestrator.roofline.hardware import Calibration, CpuProfile, Device, StepCost
from orchestrator.sim.profile import (
    CPU_STEP_BOUNDS,
    ProfilingCell,
    cpu_sim_engine,
    fit_step_costs,
    profile_from_cells,
    simulate_cell,
    step_samples,
    steps_in_flight_of,
)
from orchestrator.workload.schedule import schedule_for
from orchestrator.workload.spec import WorkloadSpec

ARCH = load_model("llama-3.1-8b-instruct")


def synthetic_trace(flops: float, bandwidth: float, step_s: float, seq_s: float, num_steps: int = 400,
                    arch=ARCH) -> pd.DataFrame:  # fmt: skip
    overheads = Calibration(1.0, 1.0, step_overhead_s=step_s, seq_overhead_s=seq_s)
    cost = StepCost(arch, Device("cpu", flops, bandwidth, 1.0, 2048, 128), overheads)
    rng = random.Random(3)
    rows, now = [], 0.0
    for step in range(num_steps):
        seqs = rng.randint(1, 40)
        prefill = rng.choice([0, 0, rng.randint(16, 2000)])
        context = rng.randint(100, 4000) * seqs
        pairs = seqs * context / seqs + prefill * (context / seqs + prefill / 2)
        rows.append({"kind": "step", "t": now, "scheduled": seqs, "running": seqs, "prefill_tokens": prefill,
                     "decode_tokens": seqs, "context_tokens": context, "attention_pairs": pairs})  # fmt: skip
        rows.append({"kind": "finish", "t": now})
        now += cost.forward_s(prefill + seqs, pairs, context, seqs) * rng.uniform(0.98, 1.02)
    return pd.DataFrame(rows)


@pytest.mark.parametrize("bounds", [None, CPU_STEP_BOUNDS])
def test_the_fitted_constants_are_the_ones_that_produced_the_steps(bounds):
    truth = (1e14, 1e12, 0.004, 0.0002)  # prefill steps compute-bound, decode steps memory-bound
    fitted = fit_step_costs(step_samples(synthetic_trace(*truth)), ARCH, bounds)
    for value, expected in zip(fitted, truth):
        assert value == pytest.approx(expected, rel=0.15)
    assert CPU_STEP_BOUNDS.notes(fitted) == ()


def test_steps_with_no_memory_term_hold_the_memory_rate_at_its_bound_and_say_so():
    # Every step of the tiny model takes its compute at 100 TFLOP/s and the overheads: the memory term never binds,
    # and an unbounded fit runs the memory rate off (to 1e24 B/s on these steps).
    tiny = load_model("tiny")
    steps = step_samples(synthetic_trace(1e14, math.inf, 0.004, 0.0002, arch=tiny))
    fitted = fit_step_costs(steps, tiny, CPU_STEP_BOUNDS)
    assert CPU_STEP_BOUNDS.lower.bytes_s <= fitted.bytes_s <= CPU_STEP_BOUNDS.upper.bytes_s
    assert (fitted.flops, fitted.step_s, fitted.seq_s) == pytest.approx((1e14, 0.004, 0.0002), rel=0.05)
    assert CPU_STEP_BOUNDS.notes(fitted) == ("the steps do not determine the memory rate: held at its upper bound of "
                                             "4,000 GB/s",)  # fmt: skip


def test_only_steps_followed_by_another_busy_step_are_samples():
    trace = synthetic_trace(4e12, 2e11, 0.004, 0.0002, num_steps=5)
    samples = step_samples(trace)
    assert len(samples) == 4 and (samples.duration_s > 0).all()


TINY_WORKLOAD = WorkloadSpec(jps=2, duration_s=15, scale=0.25, seed=7)
KNOWN = CpuProfile(peak_flops=8e10, memory_bytes_s=2.6e10, step_overhead_s=0.002, seq_overhead_s=1e-4,
                   request_overhead_s=0.04, max_num_batched_tokens=2048, num_kv_blocks=2399, block_size=32)  # fmt: skip


def test_a_profile_fitted_on_cells_of_a_known_engine_predicts_that_engine():
    # The cells as the real engine would leave them: their traces, their request rows, and the pool vLLM
    # reports (one block more than it gives out: the null block); two trials, as the profile runs them.
    arch = load_model("tiny")
    cells = []
    for workload in (TINY_WORKLOAD, TINY_WORKLOAD.model_copy(update={"seed": 8})):
        cell = simulate_cell(KNOWN, arch, "fcfs", workload)
        trace = pd.read_json(io.BytesIO(cell.scheduler_trace_bytes()), lines=True)
        cells.append(ProfilingCell(trace, pd.DataFrame([to_row(record) for record in cell.requests]), workload))
    fit = profile_from_cells(cells, KNOWN.num_kv_blocks + 1, KNOWN.block_size, arch)
    fitted = fit.profile
    assert fit.notes == ()  # every constant of the known engine is within a CPU's range and shows in its steps
    assert (fitted.num_kv_blocks, fitted.block_size) == (KNOWN.num_kv_blocks, KNOWN.block_size)
    assert fitted.request_overhead_s == pytest.approx(KNOWN.request_overhead_s, rel=0.2)
    busier = TINY_WORKLOAD.model_copy(update={"jps": 6, "seed": 42})
    for policy in ("fcfs", "continuum"):
        expected, predicted = (_mean_jct(simulate_cell(profile, arch, policy, busier)) for profile in (KNOWN, fitted))
        assert predicted == pytest.approx(expected, rel=0.1), policy


def _mean_jct(result) -> float:
    return statistics.fmean(job.jct_s for job in result.jobs if job.jct_s is not None)


def test_the_simulated_cpu_engine_has_the_measured_pool_unless_the_cell_fixes_one():
    arch = load_model("tiny")
    assert cpu_sim_engine(KNOWN, arch, "fcfs", 0, TINY_WORKLOAD).scheduler.num_blocks == KNOWN.num_kv_blocks
    # As vLLM is asked for it: the pool it reports includes its null block.
    assert cpu_sim_engine(KNOWN, arch, "fcfs", 0, TINY_WORKLOAD, num_kv_blocks=1001).scheduler.num_blocks == 1000


def test_a_profile_at_a_slower_pace_costs_every_step_and_request_that_many_times_more():
    # A lone job on an idle engine waits only for its own steps and the API server: its time outside the
    # tool calls scales with the pace.
    arch, lone = load_model("tiny"), TINY_WORKLOAD.model_copy(update={"jps": 0.1, "duration_s": 10, "seed": 1})
    cost, slower = (StepCost(arch, profile.device(), profile.calibration()) for profile in (KNOWN, KNOWN.at_pace(1.3)))
    assert slower.forward_s(700, 2e5, 3000, 5) == pytest.approx(1.3 * cost.forward_s(700, 2e5, 3000, 5))
    (shape,) = schedule_for(lone).jobs
    tool_time_s = sum(turn.tool_time_s for turn in shape.turns)
    (job,), (slow_job,) = (simulate_cell(profile, arch, "fcfs", lone).jobs for profile in (KNOWN, KNOWN.at_pace(1.3)))
    assert slow_job.jct_s - tool_time_s == pytest.approx(1.3 * (job.jct_s - tool_time_s), rel=1e-6)


def two_in_flight(trace: pd.DataFrame) -> pd.DataFrame:
    """``trace``'s steps stamped as vLLM's asynchronous scheduling stamps them: step N+1 as soon as N is launched,
    step N+2 once N's output is back (so at N's end)."""
    steps = trace[trace.kind == "step"].reset_index(drop=True)
    ends = steps.t.shift(-1).to_numpy()  # when each step's own execution ended
    stamps = [steps.t[0], steps.t[0] + 1e-4] + list(ends[:-2])
    return steps.assign(t=stamps)


def test_with_two_steps_in_flight_a_step_is_timed_from_the_next_stamp_to_the_one_after():
    trace = synthetic_trace(1e14, 1e12, 0.004, 0.0002, num_steps=60)
    truth = step_samples(trace).duration_s.to_numpy()
    shifted = two_in_flight(trace)
    # Step 1 is stamped 0.1 ms after step 0 starts: step 0 is timed that much short.
    assert step_samples(shifted, steps_in_flight=2).duration_s.to_numpy() == pytest.approx(truth[:-1], abs=2e-4)
    read_as_one = step_samples(shifted).duration_s.to_numpy()
    assert read_as_one[1:] == pytest.approx(truth[:-1], abs=2e-4) and read_as_one[0] < 1e-3  # each time a step late
    assert steps_in_flight_of(["--scheduler-cls", "orchestrator.replica.schedulers.async_variants.X"]) == 2
    assert steps_in_flight_of(["--scheduler-cls", "orchestrator.replica.schedulers.tracing.TracingScheduler"]) == 1
    assert steps_in_flight_of([]) == 1
