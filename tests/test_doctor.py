"""The doctor's verdicts (pure). The real doctor runs on this machine in a fresh environment installed from an
offline bundle (tests/test_bundle.py)."""


from orchestrator.cli.doctor import doctor_cells, not_checked_here
from orchestrator.evidence.checks import _driver_check, format_table, stack_check
from orchestrator.records.cell import NodeStack


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

