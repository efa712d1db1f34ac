"""What became of each Continuum pin, from a cell's scheduler trace and its request records (pure).

A pin holds a job's KV across its tool call so the next turn finds it. Whether that paid off depends on
the tool call's length against the pin's TTL, which is why it is measured where tool times vary:

- ``carried``: the job's next turn came while the pin still held its KV;
- ``expired``: the TTL ran out first and the next turn came later: the KV was held in vain, and recomputed
  or found in the cache by luck (a TTL too short for this tool call);
- ``gave_way``: released for other work (memory pressure, a replacing pin, a reset) before the next turn came;
- ``abandoned``: the job never sent another turn (it timed out or failed during the tool call), so the pin
  was held for nothing however it ended.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orchestrator.records.scheduler_trace import Finish, TraceEvent, UnpinReason, released_pins
from orchestrator.records.schema import RequestRecord

TRACE_KINDS = ("finish", "unpin")  # all this module reads of a trace


class PinOutcome(str, enum.Enum):
    CARRIED = "carried"
    EXPIRED = "expired"
    GAVE_WAY = "gave_way"
    ABANDONED = "abandoned"

    @property
    def in_vain(self) -> bool:
        """The KV was held and no later turn used it."""
        return self in (PinOutcome.EXPIRED, PinOutcome.ABANDONED)


@dataclass(frozen=True)
class Pin:
    job_id: str
    turn: int  # the turn whose finish pinned it
    outcome: PinOutcome
    reason: UnpinReason | None  # the release's reason in the trace; None if the run ended with the pin held
    held_s: float | None
    num_blocks: int | None


@dataclass(frozen=True)
class PinSummary:
    """A cell's pins by outcome, in percent of its pins (None without pins), and the KV held in vain."""

    num_pins: int
    pin_carried_pct: float | None
    pin_expired_pct: float | None
    pin_gave_way_pct: float | None
    pin_abandoned_pct: float | None
    pin_in_vain_block_s: float  # blocks x seconds held by expired and abandoned pins


def pin_outcomes(events: Iterable[TraceEvent], requests: Sequence[RequestRecord]) -> list[Pin]:
    events = list(events)
    released = released_pins(events)
    sent = {(record.job_id, record.turn) for record in requests}
    pins = []
    for event in events:
        if not (isinstance(event, Finish) and event.action.is_pin and event.job_id is not None):
            continue
        unpin = released.get((event.job_id, event.turn))
        reason = unpin.reason if unpin else None
        if (event.job_id, event.turn + 1) not in sent:
            outcome = PinOutcome.ABANDONED
        elif reason is UnpinReason.NEXT_TURN:
            outcome = PinOutcome.CARRIED
        elif reason is UnpinReason.TTL:
            outcome = PinOutcome.EXPIRED
        else:
            outcome = PinOutcome.GAVE_WAY
        pins.append(Pin(event.job_id, event.turn, outcome, reason, unpin.held_s if unpin else None,
                        unpin.num_blocks if unpin else None))  # fmt: skip
    return pins


def summarize_pins(pins: Sequence[Pin]) -> PinSummary:
    def share(outcome: PinOutcome) -> float | None:
        return 100 * sum(pin.outcome is outcome for pin in pins) / len(pins) if pins else None

    in_vain = sum(pin.held_s * pin.num_blocks for pin in pins if pin.outcome.in_vain and pin.held_s is not None)
    return PinSummary(len(pins), share(PinOutcome.CARRIED), share(PinOutcome.EXPIRED), share(PinOutcome.GAVE_WAY),
                      share(PinOutcome.ABANDONED), in_vain)  # fmt: skip
