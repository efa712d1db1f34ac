"""Fitting a measured engine's roofline from its step trace recovers the constants that made the steps."""

import random

import pandas as pd
import pytest

from orchestrator.sim.hardware import Calibration, Device, StepCost
from orchestrator.sim.profile import fit_step_costs, step_samples
from orchestrator.sizing.models import load_model

ARCH = load_model("llama-3.1-8b-instruct")


def synthetic_trace(flops: float, bandwidth: float, step_s: float, seq_s: float, num_steps: int = 400) -> pd.DataFrame:
    overheads = Calibration(1.0, 1.0, step_overhead_s=step_s, seq_overhead_s=seq_s)
    cost = StepCost(ARCH, Device("cpu", flops, bandwidth, 1.0, 2048, 128), overheads)
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


def test_the_fitted_constants_are_the_ones_that_produced_the_steps():
    truth = (1e14, 1e12, 0.004, 0.0002)  # prefill steps compute-bound, decode steps memory-bound
    fitted = fit_step_costs(step_samples(synthetic_trace(*truth)), ARCH)
    for value, expected in zip(fitted, truth):
        assert value == pytest.approx(expected, rel=0.15)


def test_only_steps_followed_by_another_busy_step_are_samples():
    trace = synthetic_trace(4e12, 2e11, 0.004, 0.0002, num_steps=5)
    samples = step_samples(trace)
    assert len(samples) == 4 and (samples.duration_s > 0).all()
