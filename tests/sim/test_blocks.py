"""The run-based block pool against what vLLM's block-by-block LRU free queue would do."""

import pytest

from orchestrator.mechanisms.request import SharedHold
from orchestrator.sim.blocks import BlockPool


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


# Shared segments: a replay's declared blocks, (id, engine blocks) in prompt order, cached across jobs.
TOOLS = (("s0", 2), ("s1", 2))


def test_a_shared_prefix_is_cached_once_and_hit_by_every_job_while_any_holds_it():
    pool = BlockPool(num_blocks=10)
    assert pool.shared_hit(TOOLS) == (0, 0) and pool.shared_cost(TOOLS, 0) == 4
    first = pool.hold_shared(TOOLS, 0)  # cold: computed and cached under its ids
    assert first == SharedHold(("s0", "s1"), 0) and pool.num_free == 6
    assert pool.shared_hit(TOOLS) == (4, 0) and pool.shared_cost(TOOLS, 4) == 0  # held: hitting it costs nothing
    second = pool.hold_shared(TOOLS, 4)
    assert second.keys == ("s0", "s1") and pool.num_free == 6
    pool.release_shared(first)
    assert pool.num_free == 6  # the second job still holds it
    pool.release_shared(second)
    assert pool.num_free == 10 and pool.shared_hit(TOOLS) == (4, 4)  # free, still cached
    assert pool.shared_cost(TOOLS, 4) == 4  # a hit on free blocks uses them up


def test_unheld_shared_blocks_are_evicted_from_the_free_queue_like_any_chain_and_counted():
    pool = BlockPool(num_blocks=8)
    pool.release_shared(pool.hold_shared(TOOLS, 0))
    assert pool.allocate(4) and pool.evicted_blocks == 0  # the never-used blocks first
    pool.free("job", 4, 4)  # freed after the segments: evicted after them
    assert pool.allocate(1) and pool.evicted_blocks == 1
    # s1 went first (a holder's last blocks are nearest the head): s0 whole, s1 with its leading block.
    assert pool.shared_cached_blocks("s1") == 1 and pool.shared_hit(TOOLS) == (3, 3)
    assert pool.allocate(2) and pool.shared_cached_blocks("s1") == 0 and pool.shared_hit(TOOLS) == (1, 1)
    assert pool.evicted_blocks == 3 and pool.cached_blocks("job") == 4


def test_a_partly_evicted_segment_is_hit_as_far_as_it_goes_and_made_whole_again():
    pool = BlockPool(num_blocks=8)
    pool.release_shared(pool.hold_shared(TOOLS, 0))
    assert pool.allocate(5)  # the 4 never-used blocks, then s1's last one
    pool.free("job", 5, 0)
    assert pool.shared_hit(TOOLS) == (3, 3) and pool.num_free == 8
    cost = pool.shared_cost(TOOLS, 3)
    assert cost == 4  # the 3 cached free blocks and 1 new one
    hold = pool.hold_shared(TOOLS, 3)
    assert hold == SharedHold(("s0", "s1"), 0) and pool.num_free == 8 - cost
    assert pool.shared_hit(TOOLS) == (4, 0) and pool.evicted_blocks == 1


def test_past_a_miss_a_block_cached_elsewhere_is_a_private_copy_and_a_new_one_is_cached():
    pool = BlockPool(num_blocks=12)
    other = pool.hold_shared((("s1", 2),), 0)  # another prompt's block with the same id (chained: same prefix)
    chain = (("s0", 2), ("s1", 2), ("s2", 2))
    assert pool.shared_hit(chain) == (0, 0)  # s0 is not cached: nothing after it can hit
    assert pool.shared_cost(chain, 0) == 6
    hold = pool.hold_shared(chain, 0)
    assert hold == SharedHold(("s0", "s2"), 2) and pool.num_free == 12 - 2 - 6
    pool.release_shared(hold)
    pool.release_shared(other)
    assert pool.num_free == 12 and pool.shared_hit(chain) == (6, 6)


def test_a_hit_that_stops_inside_a_segment_holds_it_and_recomputes_the_rest_privately():
    pool = BlockPool(num_blocks=10)
    pool.release_shared(pool.hold_shared(TOOLS, 0))
    cost = pool.shared_cost(TOOLS, 3)  # the prompt ends with the shared prefix: its last token is never a hit
    hold = pool.hold_shared(TOOLS, 3)
    assert hold == SharedHold(("s0", "s1"), 1) and cost == 5 and pool.num_free == 5
    pool.release_shared(hold)
    assert pool.num_free == 10 and pool.shared_hit(TOOLS) == (4, 4)
