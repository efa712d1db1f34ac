"""The simulated CPU tier's store: LRU over whole jobs, a replay's shared segments kept once."""

from __future__ import annotations

from orchestrator.mechanisms.tier_store import CpuTier


def test_the_cpu_tier_evicts_whole_jobs_least_recently_used_first():
    tier = CpuTier(capacity_tokens=1000)
    tier.save("a", 400)
    tier.save("b", 400)
    assert tier.hit("a") == 400  # "a" is now the most recently used
    tier.save("c", 300)
    assert tier.saved_tokens("b") == 0 and tier.hit("a") == 400 and tier.used_tokens == 700
    tier.save("a", 800)  # grows in place: evicts "c" to fit
    assert tier.saved_tokens("c") == 0 and tier.used_tokens == 800 and tier.evicted_tokens == 700
    tier.save("d", 1001)  # larger than the tier: not kept
    assert tier.saved_tokens("d") == 0 and tier.used_tokens == 800


def test_the_cpu_tier_saves_a_shared_prefix_once_for_every_job_and_a_jobs_own_tokens_behind_it():
    tier = CpuTier(capacity_tokens=1000)
    doc = (("d0", 100), ("d1", 100))
    tier.save_chain("a", doc, 150)  # d0 whole, d1 not yet
    assert tier.used_tokens == 100 and tier.hit_chain("c", doc) == 100
    tier.save_chain("a", doc, 260)
    assert tier.used_tokens == 260 and tier.saved_tokens("a") == 60
    assert tier.hit_chain("c", doc) == 200  # another job finds the shared blocks "a" saved, not "a"'s own
    assert tier.hit_chain("a", doc) == 260
    tier.save_chain("c", doc, 300)  # the shared blocks are kept once
    assert tier.used_tokens == 360
    tier.save("x", 700)  # evicts the least recently used entry: "a"'s own tokens
    assert tier.saved_tokens("a") == 0 and tier.hit_chain("a", doc) == 200
    small = CpuTier(capacity_tokens=300)
    small.save_chain("a", doc, 260)
    small.save("z", 100)  # evicts d0: what follows it is worth nothing (chained hashes)
    assert small.hit_chain("a", doc) == 0 and small.saved_tokens("a") == 60
