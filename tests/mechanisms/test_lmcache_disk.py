"""LMCache's local disk tier: its configuration, its store, its loads, and what it changes in a simulated cell."""

from __future__ import annotations

import statistics

import pytest

from orchestrator.mechanisms.lmcache import LMCacheCpuTier
from orchestrator.mechanisms.lmcache_disk import DISK_FOLDER, DISK_READ_BYTES_S, DiskBackedStore
from orchestrator.mechanisms.tier import DiskNeed, NodeNeed
from orchestrator.models.arch import load_model
from orchestrator.policies.catalog import PolicyError, get_policy
from orchestrator.replica.config import VllmEngineConfig
from orchestrator.replica.disk import disk_refusal
from orchestrator.roofline.hardware import Calibration, Device, StepCost
from orchestrator.sim.config import sim_engine
from orchestrator.sim.loop import simulate
from orchestrator.workload.spec import WorkloadSpec


def test_the_disk_tier_is_lmcaches_cpu_tier_with_a_local_disk_of_four_times_it_behind():
    disk, cpu_only = get_policy("lmcache-disk"), get_policy("lmcache")
    on_gpu = VllmEngineConfig(model="m", device="gpu", tensor_parallel_size=2)
    with_disk, without = disk.engine_config(on_gpu, 64.0), cpu_only.engine_config(on_gpu, 64.0)
    assert with_disk.extra_args == without.extra_args and with_disk.scheduler_cls == without.scheduler_cls
    env, plain = dict(with_disk.extra_env), dict(without.extra_env)
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == plain["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "32"  # each rank's share
    assert env["LMCACHE_MAX_LOCAL_DISK_SIZE"] == "128" and env["LMCACHE_LOCAL_DISK"].startswith("file:///")
    assert disk.tier_gib(64.0) == 64.0 and disk.tier.disk_need(64.0).gib == 256.0
    assert disk.needs == {NodeNeed.CUDA, NodeNeed.LMCACHE} and disk.keeps_kv_across_reset
    with pytest.raises(PolicyError, match="'lmcache-disk' needs a CUDA GPU"):
        disk.engine_config(VllmEngineConfig(model="m"), 64.0)


def test_its_node_needs_four_times_the_budget_of_free_disk_which_the_worker_checks_before_a_replica_starts(tmp_path):
    assert get_policy("lmcache-disk").tier.disk_need(16.0) == DiskNeed(DISK_FOLDER, 64.0)
    assert get_policy("lmcache").tier.disk_need(16.0) is None and get_policy("fcfs").tier.disk_need(16.0) is None
    not_yet_made = str(tmp_path / "tier" / "files")  # measured on the nearest folder that exists
    assert disk_refusal(not_yet_made, 0.001) is None
    refusal = disk_refusal(not_yet_made, 1e9)
    assert refusal.startswith(f"the tier fills 1e+09 GiB of local disk under {not_yet_made}, and {tmp_path} has ")
    assert refusal.endswith("GiB free: give the node more disk there, or the cell a smaller DRAM budget")


def test_the_disk_keeps_what_host_memory_evicted_and_a_lookup_says_how_much_of_it_only_the_disk_has():
    store = DiskBackedStore(capacity_tokens=1500)
    assert store.save_new("a", (), 0, 1000) == 1000 and store.save_new("b", (), 0, 1000) == 1000
    # Host memory evicted a; the disk, four times larger, keeps both.
    assert store.lookup("a", ()) == (1000, 0) and store.lookup("b", ()) == (1000, 1000)
    assert store.save_new("a", (), 1000, 1200) == 200  # a's next turn copies what is new, to both levels
    assert store.lookup("a", ()) == (1200, 1200)
    assert not store.has_unsaved(1200, 1200) and store.save_new("a", (), 1200, 1200) == 0


def test_a_load_from_disk_takes_the_disks_read_on_top_of_the_host_link():
    tier = get_policy("lmcache-disk").tier
    cost = StepCost(load_model("llama-3.1-8b-instruct"), Device.gpu("H100"), Calibration.load())
    from_memory, from_disk = tier.load_s(cost, 4096, 0), tier.load_s(cost, 4096, 4096)
    assert from_memory == cost.copy_s(4096) == LMCacheCpuTier().load_s(cost, 4096, 0)
    assert from_disk - from_memory == pytest.approx(4096 * cost.kv_bytes_per_token / DISK_READ_BYTES_S)


def _pressure_cell(policy: str, dram_gb: float):
    """The H100 pressure plan's pool (3,000 blocks) and load (1.8 JPS), simulated over 20 s."""
    workload = WorkloadSpec(jps=1.8, duration_s=20)
    engine = sim_engine(Device.gpu("H100"), "llama-3.1-8b-instruct", policy, dram_gb, workload, num_kv_blocks=3000)
    return simulate(workload, engine)


def test_where_host_memory_thrashes_the_disk_serves_the_prefixes_and_where_it_holds_them_the_two_are_one():
    small_disk, small = _pressure_cell("lmcache-disk", 8.0), _pressure_cell("lmcache", 8.0)
    assert small_disk.stats.tier_hit_tokens > 10 * small.stats.tier_hit_tokens
    assert small_disk.stats.load_stall_s > 100 * small.stats.load_stall_s  # disk reads outlast the forward pass
    mean = lambda result: statistics.fmean(job.jct_s for job in result.jobs)  # noqa: E731
    assert mean(small_disk) < 0.8 * mean(small)
    roomy_disk, roomy = _pressure_cell("lmcache-disk", 32.0), _pressure_cell("lmcache", 32.0)
    assert roomy_disk.requests == roomy.requests and roomy_disk.stats.tier_hit_tokens == roomy.stats.tier_hit_tokens
