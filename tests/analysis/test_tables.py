import math

import pandas as pd

from orchestrator.analysis.tables import (
    cpu_tier_diagnosis,
    cross_gpu_summary,
    jct_table,
    kv_lifecycle,
    missing_cells,
    per_replica,
    rank_holdings,
    serve_cost,
)
from orchestrator.cell.spec import EngineKind
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.units import GIB


def cell(gpu, policy, jps, jct, status="done", dram_gb=0.0, seed=42):
    return {"gpu": gpu, "policy": policy, "jps": jps, "dram_gb": dram_gb, "seed": seed, "status": status,
            "jct_mean_s": jct if status == "done" else None, "cell_key": f"{gpu}-{policy}-{jps}-{seed}"}  # fmt: skip


SUMMARY = pd.DataFrame(
    [cell("H100", "fcfs", 1, 10.0), cell("H100", "continuum", 1, 8.0), cell("H100", "lmcache", 1, 9.0),
     cell("H100", "fcfs", 6, 100.0), cell("H100", "continuum", 6, 40.0, seed=1), cell("H100", "continuum", 6, 60.0),
     cell("H100", "lmcache", 6, None, status="failed"),
     cell("H200", "fcfs", 1, None, status="pending"), cell("H200", "continuum", 1, None, status="pending")]
)  # fmt: skip


def test_the_winner_beats_the_best_other_policy_by_the_stated_percent_and_seeds_are_averaged():
    table = jct_table(SUMMARY, "H100").set_index("jps")
    assert table.loc[1, "winner"] == "continuum" and math.isclose(table.loc[1, "advantage_pct"], (9 - 8) / 9 * 100)
    assert table.loc[6, "continuum"] == 50.0  # mean of the two seeds
    assert math.isclose(table.loc[6, "advantage_pct"], (100 - 50) / 100 * 100)


def test_a_missing_cell_is_missing_not_zero_and_a_gpu_with_nothing_done_has_no_winner():
    assert math.isnan(jct_table(SUMMARY, "H100").set_index("jps").loc[6, "lmcache"])
    empty = jct_table(SUMMARY, "H200")
    assert list(empty.jps) == [1] and empty[["fcfs", "continuum"]].isna().all().all() and empty.winner.isna().all()
    why = missing_cells(SUMMARY)
    assert set(zip(why.gpu, why.policy, why.status)) == {("H100", "lmcache", "failed"), ("H200", "fcfs", "pending"),
                                                         ("H200", "continuum", "pending")}  # fmt: skip
    assert (why[why.status == "pending"].why == "no GPU of this type in the cluster yet").all()


def test_the_cross_gpu_summary_counts_wins_and_the_peak_advantage():
    rows = cross_gpu_summary(SUMMARY).set_index(["gpu", "policy"])
    assert rows.loc[("H100", "continuum"), "wins"] == 2 and rows.loc[("H100", "continuum"), "jps_won"] == "1, 6"
    assert rows.loc[("H100", "continuum"), "peak_at_jps"] == 6 and rows.loc[("H100", "fcfs"), "wins"] == 0
    assert rows.loc[("H200", "fcfs"), "contested_loads"] == 0


def test_the_kv_lifecycle_follows_one_job_through_the_trace():
    requests = pd.DataFrame(
        [{"job_id": "j", "turn": t, "prompt_tokens": p, "best_cached_tokens": b, "cached_tokens": c}
         for t, p, b, c in ((1, 100, 0, 0), (2, 300, 120, 96), (3, 500, 320, 0))]
        + [{"job_id": "other", "turn": 1, "prompt_tokens": 1, "best_cached_tokens": 0, "cached_tokens": 0}]
    )  # fmt: skip
    trace = pd.DataFrame(
        [{"kind": "admit", "job_id": "j", "turn": 1, "t": 10.0, "free_blocks": 50},
         {"kind": "finish", "job_id": "j", "turn": 1, "t": 11.0, "action": "pin"},
         {"kind": "admit", "job_id": "j", "turn": 2, "t": 11.6, "free_blocks": 40},
         {"kind": "finish", "job_id": "j", "turn": 2, "t": 12.0, "action": "pin"},
         {"kind": "step", "t": 12.1},
         {"kind": "admit", "job_id": "j", "turn": 3, "t": 14.0, "free_blocks": 5},
         {"kind": "finish", "job_id": "j", "turn": 3, "t": 15.0, "action": "free"}]
    )  # fmt: skip
    life = kv_lifecycle(requests, trace, "j").set_index("turn")
    assert list(life.action) == ["pin", "pin", "free"] and list(life.free_blocks_at_admit) == [50, 40, 5]
    assert math.isclose(life.loc[2, "gap_s"], 0.6) and math.isclose(life.loc[3, "gap_s"], 2.0)
    assert math.isclose(life.loc[2, "best_fraction"], 0.4) and life.loc[3, "hit_tokens"] == 0


def test_the_cpu_tier_diagnosis_tells_a_tier_that_reads_back_from_a_busy_dev_null():
    base = {"status": "done", "gpu": "H100", "policy": "lmcache", "dram_gb": 100.0, "wall_s": 100.0}
    summary = pd.DataFrame(
        [base | {"cell_key": "a", "jps": 1, "kv_offload_store_bytes": 50 * GIB, "kv_offload_load_bytes": 40 * GIB},
         # 100 GiB tier written at 10 GiB/s: a block lives 10 s, longer than the 0.5 s + 1 s reuse gap...
         base | {"cell_key": "b", "jps": 6, "kv_offload_store_bytes": 1000 * GIB, "kv_offload_load_bytes": 8 * GIB},
         # ...but almost nothing is read back: the tier churns and serves nothing
         base | {"cell_key": "c", "jps": 9, "kv_offload_store_bytes": 10**5 * GIB, "kv_offload_load_bytes": 5 * 10**4 * GIB},
         base | {"cell_key": "d", "jps": 1, "dram_gb": 0.0, "policy": "fcfs", "kv_offload_store_bytes": 0.0,
                 "kv_offload_load_bytes": 0.0}]
    )  # fmt: skip
    turns = pd.DataFrame([{"cell_key": key, "turn": t, "ttft_mean_s": 1.0} for key in "abcd" for t in (1, 2)])
    rows = cpu_tier_diagnosis(summary, turns, tool_time_s=0.5).set_index("jps")
    assert list(rows.index) == [1, 6, 9]  # the cell without a tier is not diagnosed
    assert rows.loc[1, "verdict"] == "reads back what it writes" and rows.loc[1, "reuse_gap_s"] == 1.5
    assert rows.loc[6, "retention_s"] == 10.0 and rows.loc[6, "verdict"] == "a very busy /dev/null"
    assert rows.loc[9, "retention_s"] == 0.1 and rows.loc[9, "verdict"] == "a very busy /dev/null"  # evicted first


def test_serve_cost_pairs_each_cell_through_serve_with_the_same_cell_direct():
    def one_replica(policy, router, jct, t1, seed=42):
        return {**cell("cpu", policy, 3, jct, seed=seed), "kv_policy": policy, "replicas": 1, "router": router,
                "t1_mean_s": t1, "t_last_mean_s": 2 * t1}  # fmt: skip

    summary = pd.DataFrame([one_replica("fcfs", None, 10.0, 1.0), one_replica("fcfs", "round-robin", 11.0, 1.5),
                            one_replica("continuum", None, 8.0, 1.0), one_replica("continuum", None, 9.0, 1.0, seed=1),
                            {**cell("cpu", "fcfs", 3, 12.0), "kv_policy": "fcfs", "replicas": 2,
                             "router": "round-robin", "t1_mean_s": 1.0, "t_last_mean_s": 1.0}])  # fmt: skip
    costs = serve_cost(summary)
    assert len(costs) == 1 and costs.kv_policy[0] == "fcfs"  # continuum has no Serve arm; two replicas are not a cost
    assert math.isclose(costs["job time (s) serve/direct"][0], 1.1)
    assert math.isclose(costs["first turn (s) serve/direct"][0], 1.5)
    assert serve_cost(summary[summary.router.isna()]).empty


def test_per_replica_counts_what_each_replica_served_and_the_turns_that_moved_to_it():
    def request(job, turn, replica, cached, best, status="ok"):
        return {"job_id": job, "turn": turn, "replica": replica, "cached_tokens": cached, "best_cached_tokens": best,
                "status": status}  # fmt: skip

    requests = pd.DataFrame([request("a", 0, 0, 0, 0), request("a", 1, 0, 90, 100), request("a", 2, 1, 10, 200),
                             request("b", 0, 1, 0, 0), request("b", 1, 1, 100, 100),
                             request("b", 2, 0, None, 300, status="timeout")])  # fmt: skip
    trace = pd.DataFrame([{"kind": "finish", "action": "pin", "replica": 0, "reason": None},
                          {"kind": "unpin", "action": None, "replica": 0, "reason": "ttl"},
                          {"kind": "finish", "action": "pin", "replica": 1, "reason": None},
                          {"kind": "unpin", "action": None, "replica": 1, "reason": "next_turn"}])  # fmt: skip
    rows = per_replica(requests, trace).set_index("replica")
    assert list(rows.requests) == [3, 3] and list(rows.failed) == [1, 0]
    assert list(rows.moved_in) == [1, 1]  # a's third turn went to 1, b's third to 0
    assert math.isclose(rows.prefix_kept_pct[0], 90.0)  # the failed turn counts for no replica's prefix
    assert math.isclose(rows.prefix_kept_pct[1], 100 * 110 / 300)
    assert list(rows.pins) == [1, 1] and list(rows.pins_expired) == [1, 0]
    assert per_replica(requests.assign(replica=0), trace).empty


def test_what_each_rank_holds_is_one_row_per_gpu_degree_budget_and_the_tier_its_policies_allocate():
    spec = SweepSpec(name="t", engine=EngineKind.SIM, gpus=("H100", "H200"), policies=("fcfs", "lmcache", "continuum",
                     "lmcache-nocache"), jps=(1, 3), dram_gb=(400,), model="llama-3.1-70b", tp=(4,))  # fmt: skip
    rows = rank_holdings(expand(spec))
    tiers = {(row.gpu, row.policies): row.cpu_tier_gib_per_rank for row in rows.itertuples()}
    # Each policy's own tier (Policy.tier_gib): none without one, the budget, or the ablation's 1 GiB; a quarter per rank.
    assert tiers == {(gpu, policies): tier for gpu in ("H100", "H200")
                     for policies, tier in (("continuum, fcfs", 0.0), ("lmcache", 100.0), ("lmcache-nocache", 0.25))}
    table = rows[rows.policies == "lmcache"].set_index("gpu")
    assert list(table.index) == ["H100", "H200"] and (table.tp == 4).all()
    assert table.weights_gb_per_rank.round(1).tolist() == [35.3, 35.3]
    assert table.loc["H100", "kv_tokens"] == 429_984 and round(table.loc["H100", "kv_gib_per_rank"], 1) == 32.8
