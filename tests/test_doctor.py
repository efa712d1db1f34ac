"""The doctor's verdicts (pure). The real doctor runs on this machine in a fresh environment installed from an
offline bundle (tests/test_bundle.py)."""

from types import SimpleNamespace

from orchestrator.checks import _driver_check, _lmcache_evidence, _simple_offload_evidence, format_table, stack_check
from orchestrator.doctor import doctor_cells, not_checked_here
from orchestrator.records.cell import EngineFacts, NodeStack, TierCounters


def stack(cuda, driver):
    return NodeStack(vllm="0.32.0", lmcache="0.5.6", torch="2.13.0", cuda=cuda, driver=driver, lmcache_ops_error=None)


def test_a_driver_older_than_the_cuda_runtime_of_torch_fails():
    assert _driver_check("H100", stack("13.0", "580.65.06")).ok
    old = _driver_check("H100", stack("13.0", "570.124.06"))
    assert old.ok is False and old.detail == "driver 570.124.06 for CUDA 13.0 (needs >= 580)"
    assert _driver_check("H100", stack("12.8", "570.124.06")).ok
    assert _driver_check("H100", stack(None, None)).ok is False  # a CPU build of torch on a GPU node


def test_short_cells_cover_each_policy_with_a_tier_only_where_one_is_used():
    cells = doctor_cells("H100", ("fcfs", "lmcache"), "meta-llama/Llama-3.1-8B-Instruct", 5)
    assert [(c.policy, c.dram_gb, c.workload.scale) for c in cells] == [("fcfs", 16, 1.0), ("lmcache", 16, 1.0)]
    cpu = doctor_cells("cpu", ("fcfs", "continuum"), "tiny", 5)
    assert {c.dram_gb for c in cpu} == {0} and cpu[0].engine_options.num_kv_blocks == 2400


def test_the_table_says_what_was_not_checked():
    table = format_table(not_checked_here(["cpu"]))
    assert "H100    everything       not checked  no node of this type checked" in table
    assert "GPU-only checks" in table


def test_thestack_check_names_the_tested_stack_a_node_has_and_refuses_other_combinations():
    ok = stack_check("H100", NodeStack("0.26.0", "0.5.3", "2.11.0", "13.0", "580.65.06", None), needs_lmcache=True)
    assert ok.ok and ok.detail.endswith("tested stack vllm-0.26")
    mixed = stack_check("H100", NodeStack("0.26.0", "0.5.6", "2.11.0", "13.0", "580.65.06", None), needs_lmcache=True)
    assert mixed.ok is False and "\n" not in mixed.detail
    found = "untested combination: vllm 0.26.0, lmcache 0.5.6, torch 2.11.0"
    assert mixed.detail.startswith(f"{found}; tested stacks: vllm-0.32")
    cpu = stack_check("cpu", NodeStack("0.32.0", None, "2.13.0+cpu", None, None, "lmcache is not installed"), False)
    assert cpu.ok and cpu.detail.endswith("tested stack vllm-0.32")
    no_lmcache = stack_check("H100", NodeStack("0.32.0", None, "2.13.0", "13.0", "580.65.06", "not installed"), True)
    assert no_lmcache.ok is False  # an lmcache cell needs LMCache beside vLLM


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
    stored = _lmcache_evidence("H200", "lmcache did its job", outcome_with(LMCACHE_STORES, counters))
    assert stored.ok and stored.detail == ("LMCache stored 2,304 tokens in 2 stores (its log); its tier served 0 of "
                                           "187,084 tokens vLLM looked up there")  # fmt: skip
    idle = _lmcache_evidence("H200", "lmcache did its job", outcome_with("INFO: no store here\n", counters))
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
    stored = _simple_offload_evidence("H200", "simple-offload did its job",
                                      outcome_with(SIMPLE_OFFLOAD_STORES, counters, facts))  # fmt: skip
    assert stored.ok and stored.detail == ("CPU tier stored 43 blocks (688 tokens) (its debug log); it served 0 of "
                                           "187,084 tokens vLLM looked up there")  # fmt: skip
    idle = _simple_offload_evidence("H200", "simple-offload did its job", outcome_with("INFO: nothing\n", counters))
    assert idle.ok is False and idle.detail.startswith("CPU tier stored 0 blocks (its debug log)")


def outcome_with(server_log: str, counters: TierCounters, facts: EngineFacts | None = None) -> SimpleNamespace:
    """The fields of a cell's outcome the evidence reads."""
    return SimpleNamespace(server_log=server_log, config=SimpleNamespace(tier_counters=counters, engine_facts=facts))
