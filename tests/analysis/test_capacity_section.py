"""The report's capacity section (pure): arms named by what tells them apart, ranked per GPU, one sentence per GPU
type, and the cheapest choice."""

from __future__ import annotations

import pandas as pd

from orchestrator.analysis.capacity import capacity_table, cheapest, sentences

SLO = "jct_p90=60s"


def _capacity() -> pd.DataFrame:
    rows = [("H100", "fcfs", 400, 1, 1, None, 2.0), ("H100", "lmcache", 50, 1, 1, None, 2.5),
            ("H100", "lmcache", 400, 1, 1, None, 4.0), ("H100", "continuum", 400, 1, 2, "session-affinity", 7.0),
            ("H200", "fcfs", 400, 1, 1, None, 3.0)]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["gpu", "policy", "dram_gb", "tp", "replicas", "router", "capacity_jps"])
    return frame.assign(slo=SLO, engine="sim", gpus=frame.tp * frame.replicas,
                        first_unmet_jps=frame.capacity_jps + 0.25,
                        cost_per_1k_jobs=[1.0, 0.8, 0.5, 0.6, 0.9])  # fmt: skip


def test_arms_are_named_by_budget_and_routing_and_ranked_per_gpu():
    table = capacity_table(_capacity())
    assert list(table.arm) == ["fcfs", "lmcache (50 GiB)", "lmcache (400 GiB)", "continuum x2 session-affinity", "fcfs"]
    assert set(table.found) == {"simulated"}
    # continuum's 7 JPS is on two replicas: 3.5 per GPU, below lmcache's 4.
    assert sentences(_capacity(), None) == [
        f"On H100 at {SLO}, lmcache (400 GiB) carries 4 JPS per GPU where fcfs carries 2 (+100%).",
        f"On H200 at {SLO}, fcfs carries 3 JPS per GPU.",
    ]
    assert cheapest(_capacity(), None) == "Cheapest at capacity: lmcache (400 GiB) on H100, 0.5 per thousand jobs."


def test_with_a_fleet_the_sentence_is_the_gpus_each_policy_needs_at_its_best_router():
    fleet = pd.DataFrame([("H100", "fcfs", 400, 1, "least-loaded", 20.0, 12), ("H100", "fcfs", 400, 1, "session-affinity", 20.0, 10),
                          ("H100", "continuum", 400, 1, "session-affinity", 20.0, 6)],
                         columns=["gpu", "policy", "dram_gb", "tp", "router", "target_jps", "gpus"])  # fmt: skip
    said = sentences(_capacity(), fleet)
    assert said[0] == (f"For 20 JPS at {SLO}, continuum needs 6 H100s (session-affinity) where fcfs needs 10 H100s "
                       "(session-affinity).")  # fmt: skip
