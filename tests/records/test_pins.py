"""Each pin's outcome from a hand-built trace: carried, expired, gave way or abandoned, and the KV held in vain."""

from __future__ import annotations

import pytest

from orchestrator.records.pins import PinOutcome, pin_outcomes, summarize_pins
from orchestrator.records.scheduler_trace import Finish, FinishAction, Unpin, read_trace, trace_bytes
from orchestrator.records.schema import RequestRecord, RequestStatus


def pinned(t: float, job: str, turn: int) -> Finish:
    return Finish(t=t, request_id=f"{job}-t{turn}", job_id=job, turn=turn, is_last=False, action=FinishAction.PIN,
                  free_blocks=0)  # fmt: skip


def unpin(t: float, job: str, reason: str, held_s: float, blocks: int = 10) -> Unpin:
    return Unpin(t=t, job_id=job, reason=reason, num_blocks=blocks, held_s=held_s, free_blocks=0)


def sent(job: str, turn: int) -> RequestRecord:
    return RequestRecord(job_id=job, job_index=0, turn=turn, is_last=False, status=RequestStatus.OK, scheduled_at=0.0,
                         sent_at=0.0, first_token_at=None, finished_at=1.0, target_prompt_tokens=1, prompt_tokens=1,
                         cached_tokens=0, best_cached_tokens=0, completion_tokens=1, error=None)  # fmt: skip


def test_every_pin_gets_the_outcome_its_release_and_the_jobs_next_turn_say():
    events = [
        pinned(1.0, "a", 1), unpin(1.5, "a", "next_turn", 0.5),  # a's turn 2 came while pinned
        pinned(1.0, "b", 1), unpin(3.0, "b", "ttl", 2.0),  # b came back after the TTL
        pinned(1.0, "c", 1), unpin(1.2, "c", "pressure", 0.2),  # c's KV went to an admission
        pinned(1.0, "d", 1), unpin(3.0, "d", "ttl", 2.0, blocks=5),  # d never came back
        pinned(1.0, "e", 1),  # e never came back and the run ended with its pin held
    ]  # fmt: skip
    requests = [sent(job, turn) for job in "abcde" for turn in (1, 2) if job not in "de" or turn == 1]
    pins = {pin.job_id: pin for pin in pin_outcomes(read_trace(trace_bytes(events)), requests)}
    assert {job: pin.outcome for job, pin in pins.items()} == {
        "a": PinOutcome.CARRIED, "b": PinOutcome.EXPIRED, "c": PinOutcome.GAVE_WAY, "d": PinOutcome.ABANDONED,
        "e": PinOutcome.ABANDONED,
    }  # fmt: skip
    assert pins["e"].reason is None and pins["e"].held_s is None
    summary = summarize_pins(list(pins.values()))
    assert summary.num_pins == 5
    assert (summary.pin_carried_pct, summary.pin_expired_pct, summary.pin_gave_way_pct) == (20, 20, 20)
    assert summary.pin_abandoned_pct == 40
    assert summary.pin_in_vain_block_s == pytest.approx(2.0 * 10 + 2.0 * 5)  # b's and d's; e's hold is unknown


def test_a_cell_without_pins_has_no_shares():
    summary = summarize_pins(pin_outcomes([], [sent("a", 1)]))
    assert summary.num_pins == 0 and summary.pin_carried_pct is None and summary.pin_in_vain_block_s == 0
