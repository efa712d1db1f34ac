"""The tested stacks: which one a node has, and the LMCache ops module each LMCache version falls back from."""

from orchestrator.records.cell import NodeStack
from orchestrator.replica.tested_stacks import STACKS, get_stack, lmcache_ops_module, release, stack_of


def node(vllm, lmcache, torch):
    return NodeStack(vllm, lmcache, torch, None, None, None)


def test_a_node_matches_a_stack_on_vllm_torch_and_where_needed_lmcache():
    assert stack_of(node("0.32.0", "0.5.6", "2.13.0"), needs_lmcache=True) is STACKS["vllm-0.32"]
    assert stack_of(node("0.26.0", "0.5.3", "2.11.0+cu130"), needs_lmcache=True) is STACKS["vllm-0.26"]
    assert stack_of(node("0.26.0", None, "2.11.0"), needs_lmcache=False) is STACKS["vllm-0.26"]  # the CPU build
    assert stack_of(node("0.26.0", None, "2.11.0"), needs_lmcache=True) is None
    assert stack_of(node("0.32.0", "0.5.3", "2.13.0"), needs_lmcache=False) is None  # a mixed pair is untested
    assert stack_of(node("0.32.0", "0.5.6", "2.11.0"), needs_lmcache=True) is None


def test_lmcache_renamed_its_compiled_ops_and_each_stack_knows_its_name():
    assert lmcache_ops_module("0.5.3") == "lmcache.c_ops" and lmcache_ops_module("0.5.6") == "lmcache.cuda_ops"
    assert release("2.13.0+cpu") == "2.13.0" and release(None) is None
    assert get_stack("vllm-0.26").torch == "2.11.0"
