"""The pressure benchmark's machinery, on simulated sweeps standing in for the measured ones (the real CPU
engine's grid takes about an hour), their files written in this process (``tests.simulated``): cells matched
by policy and load, the verdicts read from both sides, and the diagnostic that simulates each trial again at the
pace its measured steps ran."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.sim_vs_cpu import PRESSURE, compare_pool, pool_spec, simulated_twin
from orchestrator.cell.spec import EngineKind
from orchestrator.models.arch import load_model
from tests.sim.test_profile import KNOWN
from tests.simulated import simulated_sweep

POOL = 1200


def test_a_simulated_twin_is_compared_cell_by_cell_and_verdict_by_verdict(tmp_path):
    base = PRESSURE.model_copy(update={"engine": EngineKind.SIM, "policies": ("fcfs", "continuum"), "jps": (1.0, 6.0),
                                       "cpu_profile": KNOWN})  # fmt: skip
    stand_in = pool_spec(base, POOL)  # the measured side, simulated from the known engine
    same = simulated_twin(stand_in, KNOWN)
    half_flops = replace(KNOWN, peak_flops=KNOWN.peak_flops / 2)
    slower = simulated_twin(stand_in, half_flops).model_copy(update={"name": "slower"})
    # The measured side's verdicts are read from its report, as the benchmark reads a measured sweep's.
    files = {spec.name: simulated_sweep(spec, tmp_path, report=spec is stand_in) for spec in (stand_in, same, slower)}

    arch = load_model(base.model)
    cells, verdicts = compare_pool(POOL, files[stand_in.name], files[same.name], KNOWN, arch)
    assert sorted((row["policy"], row["jps"]) for row in cells) == [("continuum", 1.0), ("continuum", 6.0),
                                                                     ("fcfs", 1.0), ("fcfs", 6.0)]  # fmt: skip
    assert all(row["jct_error"] == 0 and row["spike_same"] and row["kv_blocks"] == POOL for row in cells)
    # The stand-in's steps took what the known engine's roofline says.
    assert all(row["step_pace"] == pytest.approx(1.0, abs=0.01) for row in cells), cells
    assert all(row["jct_error_paced"] == pytest.approx(0.0, abs=0.02) for row in cells), cells
    assert [row["jps"] for row in verdicts] == [1.0, 6.0]
    assert all(row["agree"] is (True if row["significant"] else None) for row in verdicts)
    # At 6 JPS the 1200-block pool is far too small for FCFS. The stand-in's own verdict is a simulated
    # sweep's, inside the simulator's error band (a tie, so nothing to agree with); the prediction compared
    # with a measurement carries no band and names Continuum.
    assert (verdicts[1]["measured"], verdicts[1]["agree"], verdicts[1]["simulated"]) == ("tie", None, "continuum")

    cells, _ = compare_pool(POOL, files[stand_in.name], files[slower.name], half_flops, arch)
    assert all(row["jct_error"] > 0 for row in cells), cells  # half the FLOP/s: every simulated job slower
    assert all(row["step_pace"] < 0.9 for row in cells), cells  # and the stand-in stepped faster than that profile
    # Simulated again at the pace the stand-in's steps ran, the slower profile's error mostly goes: the rest is
    # that halving the FLOP/s slows compute-bound steps only, where the pace slows every step alike.
    assert all(abs(row["jct_error_paced"]) < abs(row["jct_error"]) / 3 for row in cells), cells
