"""The run-based block pool against what vLLM's block-by-block LRU free queue would do."""

import pytest

from orchestrator.sim.blocks import BlockPool, CpuTier


def test_freed_blocks_are_evicted_oldest_request_first_and_each_chain_from_its_tail():
    pool = BlockPool(num_blocks=20, num_shared_blocks=2)
    assert pool.allocate(10) and pool.num_free == 8
    pool.free("old", num_blocks=4, num_cached=3)  # 3 full blocks and a partial one
    pool.free("new", num_blocks=6, num_cached=6)
    assert pool.num_free == 18 and pool.cached_blocks("old") == 3
    # The 8 never-used blocks go first, then the partial block, then "old"'s chain from its tail.
    assert pool.allocate(9) and pool.cached_blocks("old") == 3 and pool.evicted_blocks == 0
    assert pool.allocate(2) and pool.cached_blocks("old") == 1 and pool.cached_blocks("new") == 6
    assert pool.allocate(3) and pool.cached_blocks("old") == 0 and pool.cached_blocks("new") == 4
    assert pool.evicted_blocks == 5 and pool.num_free == 4
    assert not pool.allocate(5)  # more than is free: nothing changes
    assert pool.num_free == 4 and pool.cached_blocks("new") == 4


def test_a_hit_takes_the_chain_out_of_the_free_queue_so_it_cannot_be_evicted():
    pool = BlockPool(num_blocks=10)
    pool.allocate(4)
    pool.free("job", 4, 4)
    pool.touch("job", 4)
    assert pool.num_free == 6 and pool.cached_blocks("job") == 4
    assert pool.allocate(6) and pool.evicted_blocks == 0 and pool.cached_blocks("job") == 4


def test_a_hit_on_part_of_a_chain_leaves_the_rest_as_uncached_free_blocks():
    pool = BlockPool(num_blocks=10)
    pool.allocate(6)
    pool.free("job", 6, 6)
    pool.touch("job", 4)
    assert pool.num_free == 6 and pool.cached_blocks("job") == 4
    assert pool.allocate(6) and pool.evicted_blocks == 0


def test_held_blocks_of_a_pin_stay_cached_and_only_the_uncached_ones_go_back():
    pool = BlockPool(num_blocks=10)
    pool.allocate(5)
    pool.hold("job", 4)
    pool.release_uncached(1)
    assert pool.num_free == 6 and pool.cached_blocks("job") == 4
    assert pool.allocate(6) and pool.cached_blocks("job") == 4  # held blocks are never evicted


def test_the_pool_must_leave_room_beyond_the_shared_prefix():
    with pytest.raises(ValueError, match="cannot hold the 10 shared prefix blocks"):
        BlockPool(num_blocks=10, num_shared_blocks=10)


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
