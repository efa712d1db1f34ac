"""The routing benchmark's machinery, on a simulated stand-in of ``sweeps/routing_cpu.py`` (the real CPU engine's
grid takes about 14 minutes), its files written in this process (``tests.simulated``): an arm per cell, Serve's
cost as each one-replica cell through Serve over the same cell direct, and the measured arms beside the
simulated ones."""

from __future__ import annotations

import math

from benchmarks.serve_routing import real_against_simulated, serve_cost, table
from orchestrator.cell.spec import EngineKind
from orchestrator.sweeps.routing_cpu import SPEC
from tests.sim.test_profile import KNOWN
from tests.simulated import simulated_sweep


def test_every_arm_gets_a_row_and_serve_is_compared_with_direct_per_policy(tmp_path):
    stand_in = SPEC.model_copy(update={"engine": EngineKind.SIM, "cpu_profile": KNOWN,
                                       "workload": SPEC.workload.model_copy(update={"duration_s": 5.0})})  # fmt: skip
    rows = table(simulated_sweep(stand_in, tmp_path))
    assert sorted(set(rows.arm)) == ["direct x1", "round-robin x2", "serve x1", "session-affinity x2"]
    assert sorted(set(rows.policy)) == ["continuum", "fcfs"] and len(rows) == 8
    keyed = rows.set_index(["policy", "arm"])
    moved = keyed.turns_moved_pct
    assert moved["continuum", "round-robin x2"] > moved["continuum", "session-affinity x2"]
    costs = serve_cost(rows).set_index("policy")
    for policy in ("fcfs", "continuum"):
        expected = keyed.jct_mean_s[policy, "serve x1"] / keyed.jct_mean_s[policy, "direct x1"]
        assert math.isclose(costs.loc[policy, "jct_mean_s serve/direct"], expected)
    halved = rows.assign(jct_mean_s=rows.jct_mean_s / 2)
    compared = real_against_simulated(rows, halved)
    assert len(compared) == 8 and (compared["jct sim/real"] == 0.5).all()
    assert (compared["prefix_kept_pct real"] == compared["prefix_kept_pct sim"]).all()
