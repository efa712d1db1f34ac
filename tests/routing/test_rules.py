"""The routers' rules, as the simulator and the Serve request router call them."""

from __future__ import annotations

import pytest

from orchestrator.routing.prefix_index import PrefixIndex, chunks_held, text_block_hashes
from orchestrator.routing.rules import LOAD_SLACK, RouteRequest, RouterKind, RouterSetup, make_router


def chain(job: str, num_blocks: int, num_shared: int = 2) -> tuple:
    return tuple(("system", i) for i in range(num_shared)) + tuple((job, i) for i in range(num_blocks))


def test_round_robin_takes_the_candidates_in_turn_whatever_they_hold():
    router = make_router("round-robin", RouterSetup(3))
    loads = {0: 9, 1: 0, 2: 0}
    assert [router.choose(RouteRequest("a"), loads) for _ in range(4)] == [0, 1, 2, 0]
    assert router.choose(RouteRequest("a"), {0: 0, 2: 0}) == 2  # a replica that is gone is not a candidate


def test_least_loaded_never_takes_the_busier_of_its_pair_and_draws_the_same_pairs_from_one_seed():
    router = make_router(RouterKind.LEAST_LOADED, RouterSetup(2, seed=7))
    assert {router.choose(RouteRequest("a"), {0: 5, 1: 1}) for _ in range(50)} == {1}
    loads = {0: 3, 1: 3, 2: 1, 3: 8}
    first = [make_router("least-loaded", RouterSetup(4, seed=7)).choose(RouteRequest("a"), loads) for _ in range(3)]
    picks = [make_router("least-loaded", RouterSetup(4, seed=7)) for _ in range(2)]
    runs = [[router.choose(RouteRequest("a"), loads) for _ in range(40)] for router in picks]
    assert runs[0] == runs[1] and 3 not in runs[0] and set(first) <= {0, 1, 2}
    assert make_router("least-loaded", RouterSetup(1)).choose(RouteRequest("a"), {0: 4}) == 0


def test_session_affinity_keeps_a_job_home_until_its_home_is_overloaded_then_moves_it_for_good():
    router = make_router("session-affinity", RouterSetup(2))
    assert router.choose(RouteRequest("a"), {0: 1, 1: 0}) == 1  # the first turn goes to the least loaded
    assert router.choose(RouteRequest("a"), {0: 0, 1: LOAD_SLACK}) == 1  # busier, within the slack: stays
    assert router.choose(RouteRequest("a"), {0: 0, 1: LOAD_SLACK + 1}) == 0  # overloaded: moves
    assert router.choose(RouteRequest("a"), {0: 2, 1: 0}) == 0  # and its new home keeps it
    assert router.choose(RouteRequest("a"), {1: 0}) == 1  # a home that is gone is replaced


def test_prefix_aware_follows_the_longest_believed_prefix_within_the_load_guard():
    router = make_router("prefix-aware", RouterSetup(3))
    first = router.choose(RouteRequest("a", chain("a", 10)), {0: 0, 1: 0, 2: 0})
    assert first == 0  # nothing cached anywhere: the least loaded, lowest index
    assert router.choose(RouteRequest("b", chain("b", 10)), {0: 1, 1: 0, 2: 0}) == 1  # 2 shared blocks of 12: load
    busier = {0: 3, 1: 0, 2: 0}
    assert router.choose(RouteRequest("a", chain("a", 20)), busier) == 0  # a's own prefix, within the slack
    overloaded = {0: LOAD_SLACK + 1, 1: 0, 2: 0}
    assert router.choose(RouteRequest("a", chain("a", 30)), overloaded) == 1  # over the slack: load wins
    assert router.choose(RouteRequest("c"), {0: 0, 1: 0, 2: 0}) == 0  # no full block: the least loaded


def test_a_prefix_index_forgets_the_least_recently_sent_blocks_beyond_its_capacity():
    index = PrefixIndex(capacity_blocks=12)
    index.add(chain("a", 8))
    index.add(chain("b", 8))  # the system blocks are refreshed; a's oldest blocks go
    assert len(index) == 12 and index.num_matched(chain("b", 8)) == 10
    assert index.num_matched(chain("a", 8)) == 2  # the shared blocks, then a's first block is gone
    with pytest.raises(ValueError, match="at least one block"):
        PrefixIndex(0)


def test_an_unknown_router_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match="unknown router 'random'; known: round-robin, least-loaded, session-affinity, "
                                         "prefix-aware"):  # fmt: skip
        make_router("random", RouterSetup(2))
    with pytest.raises(ValueError, match="at least one replica, not 0"):
        make_router("round-robin", RouterSetup(0))


def test_prompt_text_hashes_chain_whole_chunks_so_equal_hashes_mean_equal_prefixes():
    base = "s" * 128 + "a" * 64
    hashes = text_block_hashes(base + "x" * 63)  # the partial last chunk is left out
    assert len(hashes) == 3 and hashes == text_block_hashes(base)
    other = text_block_hashes("s" * 128 + "b" * 64)
    assert other[:2] == hashes[:2] and other[2] != hashes[2]
    assert text_block_hashes("t" + "s" * 127 + "a" * 64)[1:] != hashes[1:]  # a chunk's hash carries its whole prefix
    index = PrefixIndex(chunks_held(num_kv_blocks=8, block_size=16))  # 128 tokens, about 512 characters
    assert index.capacity_blocks == 8
    index.add(hashes)
    assert index.num_matched(other) == 2
