"""Tier mechanisms: the records on a real engine that prove a tier stored and served, and the none tier."""

from __future__ import annotations

from types import SimpleNamespace

from orchestrator.mechanisms.lmcache import LMCacheCpuTier
from orchestrator.mechanisms.native_offload import SimpleOffload
from orchestrator.mechanisms.registry import TIERS
from orchestrator.mechanisms.tier import NoTier
from orchestrator.policies.catalog import POLICIES, get_policy, policies_covering_every_mechanism
from orchestrator.records.cell import EngineFacts, TierCounters

# Two of LMCache 0.5.3's log lines from the first H200 lmcache cell (docs/gpu-runs/2026-11-26-H200.md), colours kept.
LMCACHE_STORES = (
    "(EngineCore pid=1676) \x1b[32;20m[2026-11-26 10:50:16,887] LMCache INFO:\x1b[0m [req_id=cmpl-b724636775c1e792-0-"
    "acb17201] Stored 1536 out of total 1536 tokens. size: 0.1875 GB, cost 13.5188 ms, throughput: 13.8695 GB/s; "
    "offload_time: 13.3437 ms, put_time: 0.0948 ms \x1b[3m(cache_engine.py:577:lmcache.v1.cache_engine)\x1b[0m\n"
    "(EngineCore pid=1676) \x1b[32;20m[2026-11-26 10:50:16,895] LMCache INFO:\x1b[0m [req_id=cmpl-b77676a4443e7ee7-0-"
    "addfcb2b] Stored 768 out of total 768 tokens. size: 0.0938 GB, cost 7.4086 ms, throughput: 25.3083 GB/s; "
    "offload_time: 7.2949 ms, put_time: 0.0669 ms \x1b[3m(cache_engine.py:577:lmcache.v1.cache_engine)\x1b[0m\n"
)


def test_lmcache_is_seen_storing_in_its_own_log_lines_where_vllm_counts_no_offload_bytes():
    """On the H200 vLLM's kv_offload_* counters (its OffloadingConnector's) stayed 0 while LMCache stored."""
    counters = TierCounters(kv_offload_store_bytes=None, external_prefix_cache_queries=187084.0,
                            external_prefix_cache_hits=0.0)  # fmt: skip
    stored = LMCacheCpuTier().evidence(outcome_with(LMCACHE_STORES, counters))
    assert stored.ok and stored.detail == ("LMCache stored 2,304 tokens in 2 stores (its log); its tier served 0 of "
                                           "187,084 tokens vLLM looked up there")  # fmt: skip
    idle = LMCacheCpuTier().evidence(outcome_with("INFO: no store here\n", counters))
    assert idle.ok is False and idle.detail.startswith("LMCache stored 0 tokens in 0 stores")


# vLLM 0.26's SimpleCPUOffloadConnector's debug lines, as its manager formats them (simple_kv_offload/manager.py).
SIMPLE_OFFLOAD_STORES = (
    "(EngineCore pid=1233) DEBUG 11-26 18:22:41 [manager.py:654] Request cmpl-9a-0: Scheduling store of 3 blocks to "
    "CPU (1 groups)\n"
    "(EngineCore pid=1233) DEBUG 11-26 18:22:41 [manager.py:705] Store event 7 completed: cached 3 blocks to CPU\n"
    "(EngineCore pid=1233) DEBUG 11-26 18:22:42 [manager.py:705] Store event 8 completed: cached 40 blocks to CPU\n"
)


def test_a_cpu_tier_without_offload_counters_is_seen_storing_in_its_connectors_debug_lines():
    """On the H200 vLLM 0.26's SimpleCPUOffloadConnector exported no kv_offload_* counters at all."""
    counters = TierCounters(external_prefix_cache_queries=187084.0, external_prefix_cache_hits=0.0)
    facts = EngineFacts("0.26.0", 16, 52478, 839648, "NVIDIA H200")
    stored = SimpleOffload().evidence(outcome_with(SIMPLE_OFFLOAD_STORES, counters, facts))  # fmt: skip
    assert stored.ok and stored.detail == ("CPU tier stored 43 blocks (688 tokens) (its debug log); it served 0 of "
                                           "187,084 tokens vLLM looked up there")  # fmt: skip
    idle = SimpleOffload().evidence(outcome_with("INFO: nothing\n", counters))
    assert idle.ok is False and idle.detail.startswith("CPU tier stored 0 blocks (its debug log)")


def test_a_policy_without_a_tier_has_the_none_tier_which_asks_vllm_for_nothing_and_keeps_nothing():
    tier = get_policy("continuum").tier
    assert isinstance(tier, NoTier) and TIERS["none"] is NoTier and tier.sim_model is None
    assert tier.connector(tier.connector_gib(64.0, 2)) == ((), {}) and tier.size_gib(64.0) == 0.0
    assert tier.dram_gb_taken(64.0) == 0.0 and not tier.is_the_budget and tier.needs == frozenset()
    store = tier.sim_store(10_000)
    assert store.save_new("a", (), 0, 1000) == 0 and not store.has_unsaved(0, 1000) and store.lookup("a", ()) == (0, 0)
    assert tier.sim_counters(1.0, 2.0, 3, 4) == TierCounters()
    outcome = outcome_with(LMCACHE_STORES, TierCounters(kv_offload_store_bytes=1.0))
    assert tier.evidence(outcome) is None and tier.stores(outcome, 1.0) is None


def outcome_with(server_log: str, counters: TierCounters, facts: EngineFacts | None = None) -> SimpleNamespace:
    """The fields of a cell's outcome the evidence reads."""
    return SimpleNamespace(server_log=server_log, config=SimpleNamespace(tier_counters=counters, engine_facts=facts))


def test_a_node_check_runs_the_fewest_policies_that_run_every_mechanism_a_new_tier_included():
    gpu = policies_covering_every_mechanism("gpu")
    assert gpu == ("fcfs", "continuum", "lmcache", "native-offload", "simple-offload", "lmcache-disk")
    assert policies_covering_every_mechanism("cpu") == ("fcfs", "continuum")  # the connectors are CUDA-only
    covered = frozenset().union(*(get_policy(name).mechanisms for name in gpu))
    assert covered == frozenset().union(*(policy.mechanisms for policy in POLICIES.values()))
