"""Continuum's decisions (``mechanisms.continuum.rules``) on a pin table and plain numbers, as both the vLLM plugin
and the simulator call them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from orchestrator.mechanisms.continuum.config import AdmissionRelease, ContinuumConfig, TtlMode
from orchestrator.mechanisms.continuum.pins import PINNED_PRIORITY_OFFSET, PinTable
from orchestrator.mechanisms.continuum.rules import (
    keeps_finished_blocks,
    must_wait_for_reserve,
    num_blocks_for,
    take_for_aborted_job,
    take_for_next_turn,
    take_pressure_victim,
    waiting_priority,
)

BLOCK = 16


@dataclass(frozen=True)
class Turn:
    job_id: str | None
    job_index: int = 0
    turn: int | None = 1
    is_last: bool = False


def _table(**config) -> PinTable:
    return PinTable(ContinuumConfig(**config))


def test_blocks_round_up():
    assert [num_blocks_for(tokens, BLOCK) for tokens in (0, 1, 16, 17, 32)] == [0, 1, 1, 2, 2]


def test_a_pinned_jobs_turn_waits_before_every_unpinned_request_and_pinned_jobs_keep_their_order():
    pins = _table()
    pins.pin("young", 7, ["b"], now=0.0)
    pins.pin("old", 2, ["b"], now=0.0)
    young, old = waiting_priority(pins, Turn("young", 7), 7), waiting_priority(pins, Turn("old", 2), 2)
    assert old == PINNED_PRIORITY_OFFSET + 2 < young == PINNED_PRIORITY_OFFSET + 7 < 0
    assert waiting_priority(pins, Turn("unpinned", 1), 1) == 1
    assert waiting_priority(pins, Turn(None, 7), 3) == 3
    assert waiting_priority(_table(pinned_first=False), Turn("young", 7), 7) == 7


def _learned(final_blocks: int = 20, **config) -> PinTable:
    """A table that has seen one job finish at ``final_blocks``, with job "p" pinned on 5 blocks."""
    pins = _table(**config)
    pins.on_job_finished(final_blocks)
    pins.pin("p", 0, list(range(5)), now=0.0)
    return pins


def _wait(pins: PinTable, job: Turn, num_free_blocks: int, num_tokens: int = 13 * BLOCK, computed: int = 0, running=()):
    return must_wait_for_reserve(
        pins, job, num_computed_tokens=computed, num_tokens=num_tokens, num_free_blocks=num_free_blocks,
        running_job_tokens=running, block_size=BLOCK,
    )  # fmt: skip


def test_the_reserve_holds_a_new_jobs_first_turn_back_while_the_jobs_in_flight_could_not_grow():
    pins = _learned()  # the pinned job may still grow by 20 - 5 = 15 blocks
    new = Turn("new", 3)
    assert _wait(pins, new, num_free_blocks=27)  # 13 blocks would leave 14
    assert not _wait(pins, new, num_free_blocks=28)  # ... or 15
    # A running request of a job with turns to come counts too: 40 tokens = 3 blocks, 17 more to grow.
    assert _wait(pins, new, num_free_blocks=13 + 15 + 17 - 1, running=[40])
    assert not _wait(pins, new, num_free_blocks=13 + 15 + 17, running=[40])


def test_only_a_new_jobs_first_turn_that_has_computed_nothing_is_held_back():
    pins = _learned()
    assert not _wait(pins, Turn("new", 3, turn=2), num_free_blocks=0)
    assert not _wait(pins, Turn("p", 0, turn=1), num_free_blocks=0)  # its job holds a pin: not new
    assert not _wait(pins, Turn("new", 3), num_free_blocks=0, computed=BLOCK)  # admitted already
    # Requests without job information are outside Continuum, a missing turn number included.
    assert not _wait(pins, Turn(None), num_free_blocks=0)
    assert not _wait(pins, Turn("new", 3, turn=None), num_free_blocks=0)


def test_with_nothing_learned_or_the_reserve_off_a_first_turn_waits_only_when_it_does_not_fit():
    for pins in (_table(), _learned(reserve_for_pinned=False)):
        assert not _wait(pins, Turn("new", 3), num_free_blocks=13)
        assert _wait(pins, Turn("new", 3), num_free_blocks=12)


def test_the_running_sizes_are_read_only_when_the_reserve_decides():
    def unreadable():
        raise AssertionError("read although the request is exempt")
        yield  # pragma: no cover

    assert not _wait(_learned(), Turn("new", 3, turn=2), num_free_blocks=0, running=unreadable())
    with pytest.raises(AssertionError, match="read although"):
        _wait(_learned(), Turn("new", 3), num_free_blocks=0, running=unreadable())


def _three_pins(release: AdmissionRelease) -> PinTable:
    pins = _table(admission_release=release)
    for index, (job, pinned_at) in enumerate((("a", 5.0), ("b", 9.0), ("c", 1.0))):
        pins.pin(job, index, [job], now=pinned_at)
    return pins


def test_the_release_rule_decides_which_pin_gives_way_to_a_request_short_of_blocks():
    younger, always, idle = AdmissionRelease.YOUNGER, AdmissionRelease.ALWAYS, AdmissionRelease.IDLE
    assert take_pressure_victim(_three_pins(younger), Turn("b", 1), num_others_running=3).job_id == "c"
    assert take_pressure_victim(_three_pins(younger), Turn("c", 2), num_others_running=0) is None
    assert take_pressure_victim(_three_pins(younger), Turn(None, 0), num_others_running=3).job_id == "c"
    assert take_pressure_victim(_three_pins(always), Turn("c", 2), num_others_running=3).job_id == "b"
    # The prototype: nothing gives way while others run; then the most recently pinned goes first.
    assert take_pressure_victim(_three_pins(idle), Turn("a", 0), num_others_running=1) is None
    assert take_pressure_victim(_three_pins(idle), Turn("a", 0), num_others_running=0).job_id == "b"


def test_the_victim_leaves_the_table_and_the_youngest_younger_job_goes_first():
    pins = _three_pins(AdmissionRelease.YOUNGER)
    taken = [take_pressure_victim(pins, Turn("a", 0), num_others_running=1) for _ in range(3)]
    assert [pin.job_id if pin else None for pin in taken] == ["c", "b", None] and len(pins) == 1


def test_a_finished_turn_is_pinned_unless_it_was_its_jobs_last():
    pins = _table(ttl_s=2.0)
    assert keeps_finished_blocks(pins, Turn("a", is_last=False), num_tokens=100, block_size=BLOCK)
    assert not keeps_finished_blocks(pins, Turn(None, is_last=False), num_tokens=100, block_size=BLOCK)
    assert pins.reserved_blocks() == 0
    pins.pin("b", 1, [0] * 3, now=0.0)
    assert not keeps_finished_blocks(pins, Turn("a", is_last=True), num_tokens=20 * BLOCK - 1, block_size=BLOCK)
    assert pins.reserved_blocks() == 20 - 3  # the last turn taught how large a job grows


def test_a_last_turn_forgets_its_jobs_tool_gaps():
    pins = _table(ttl_mode=TtlMode.ADAPTIVE, ttl_s=2.0, adaptive_factor=1.0)
    for job, gap in (("a", 5.0), ("b", 1.0)):
        pins.pin(job, 0, [], now=0.0)
        pins.on_turn_arrived(job, arrived_at=gap)
    assert pins.ttl_for("a") == 5.0
    keeps_finished_blocks(pins, Turn("a", is_last=True), num_tokens=10, block_size=BLOCK)
    assert pins.ttl_for("a") == 3.0  # its own longest gap is gone: the median of all gaps seen
    pins.on_turn_arrived("a", arrived_at=50.0)  # no finish of "a" is remembered: nothing learned
    assert pins.ttl_for("a") == 3.0


def test_the_next_turn_and_an_abort_take_the_jobs_pin():
    pins = _table()
    pins.pin("a", 0, ["a1"], now=0.0)
    pins.pin("b", 1, ["b1"], now=0.0)
    assert take_for_next_turn(pins, None) is None
    assert take_for_next_turn(pins, "a").blocks == ["a1"] and take_for_next_turn(pins, "a") is None
    assert take_for_aborted_job(pins, "b").blocks == ["b1"] and len(pins) == 0
