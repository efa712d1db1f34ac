"""The scheduler trace: one JSON line per event, written by our vLLM scheduler plugin and by the simulator (pure).

Each event kind is a frozen dataclass. A line is ``{"kind": ..., <the fields in declaration order>}`` as compact
JSON (separators ``,`` and ``:``), so the field order here is the key order on disk: analysis and calibration
read these files, and the simulator's fingerprint hashes them, so a field is added at the end or not at all.

- ``Step``: after every ``schedule()``; what the step's cost depends on, and the pool's state after it.
- ``Admit``: a request admitted for the first time, with its prefix-cache hit.
- ``Finish``: a request finished; its blocks were freed (``action=free``) or kept for the job (``action=pin``).
- ``Unpin``: a pin was released, with its reason (``UnpinReason``).
- ``Evict``: cached blocks the engine took from its free queue for reuse since its last ``Evict``, written by the
  plugin after a step that evicted (vLLM exports no such counter); the simulator counts them in its stats instead.

Imports nothing of vLLM, Ray or the filesystem: the plugin writes the lines where it must, the simulator keeps them.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

_SEPARATORS = (",", ":")


def attention_pairs(num_new: int, num_before: int) -> float:
    """The (query, key) products of causal attention when ``num_new`` tokens follow ``num_before`` computed ones:
    each new token attends to every token before it and to itself. A roofline feature of the step's cost."""
    return num_new * (num_before + (num_new + 1) / 2)


class FinishAction(str, enum.Enum):
    FREE = "free"  # the blocks went back to the pool (they stay cached until evicted)
    PIN = "pin"  # the blocks stay referenced for the job's next turn

    @property
    def is_pin(self) -> bool:
        return self is FinishAction.PIN


class UnpinReason(str, enum.Enum):
    """Why a pin was released, by the vLLM plugin and the simulator alike."""

    NEXT_TURN = "next_turn"  # the job's next turn arrived while the pin held its KV
    TTL = "ttl"  # the tool call outlasted the pin's time to live
    PRESSURE = "pressure"  # taken for another request's admission under memory pressure
    REPLACED = "replaced"  # the job pinned a later turn
    ABORT = "abort"  # the job's request was aborted (the client gave up)
    RESET = "reset"  # the replica's prefix cache was reset


@dataclass(frozen=True)
class Step:
    """One ``schedule()``. ``t`` is when it was written: the step's end in the simulator, right after scheduling in
    the plugin. Counts are of requests, tokens and blocks."""

    kind: ClassVar[str] = "step"
    t: float
    step: int  # 1-based count of schedule() calls
    running: int
    waiting: int
    scheduled: int  # requests given tokens in this step
    prefill_tokens: int
    decode_tokens: int
    context_tokens: int  # KV read: every scheduled request's context including this step's tokens
    attention_pairs: float  # the sum of ``attention_pairs`` over the scheduled requests
    free_blocks: int  # vLLM counts evictable cached blocks as free
    pinned_blocks: int
    preempted: int


@dataclass(frozen=True)
class Admit:
    """A request's first admission. ``job_id`` and ``turn`` are None for a request from another client."""

    kind: ClassVar[str] = "admit"
    t: float
    request_id: str
    job_id: str | None
    turn: int | None
    prompt_tokens: int
    cached_tokens: int  # computed from the prefix cache (and a CPU tier) at admission
    free_blocks: int


@dataclass(frozen=True)
class Finish:
    """A request finished and its blocks were freed or pinned."""

    kind: ClassVar[str] = "finish"
    t: float
    request_id: str
    job_id: str | None
    turn: int | None
    is_last: bool
    action: FinishAction
    free_blocks: int


@dataclass(frozen=True)
class Unpin:
    """A pin released: its blocks went back to the pool (or wait for an in-flight step to free them)."""

    kind: ClassVar[str] = "unpin"
    t: float
    job_id: str
    reason: UnpinReason
    num_blocks: int
    held_s: float
    free_blocks: int


@dataclass(frozen=True)
class Evict:
    """Cached blocks the engine evicted (their KV dropped to make room) since the last ``Evict``."""

    kind: ClassVar[str] = "evict"
    t: float
    num_blocks: int


TraceEvent = Step | Admit | Finish | Unpin | Evict


@dataclass(frozen=True)
class DecodeSteps:
    """Consecutive ``Step`` events of one batch in which each of its ``running`` requests decoded one token, kept
    as one entry (the simulator's decode runs): step ``first_step + j`` was written at ``starts[j]`` and left
    ``free_blocks[j]`` free, and each step reads ``running`` more tokens of context than the one before."""

    first_step: int
    running: int
    context_tokens: int  # read by the first step
    pinned_blocks: int
    starts: tuple[float, ...]
    free_blocks: tuple[int, ...]

    @property
    def t(self) -> float:
        return self.starts[0]

    def steps(self) -> Iterator[Step]:
        n = self.running
        for index, (start, free) in enumerate(zip(self.starts, self.free_blocks)):
            context = self.context_tokens + index * n
            yield Step(t=start, step=self.first_step + index, running=n, waiting=0, scheduled=n, prefill_tokens=0,
                       decode_tokens=n, context_tokens=context, attention_pairs=float(context), free_blocks=free,
                       pinned_blocks=self.pinned_blocks, preempted=0)  # fmt: skip


TraceEntry = TraceEvent | DecodeSteps  # what an engine keeps; ``expanded`` gives the events


def expanded(entries: Iterable[TraceEntry]) -> Iterator[TraceEvent]:
    """The events of a trace whose decode runs are kept whole, in order."""
    for entry in entries:
        if isinstance(entry, DecodeSteps):
            yield from entry.steps()
        else:
            yield entry


def trace_line(event: TraceEvent, replica: int | None = None) -> str:
    """The event's JSON line, newline included. ``vars`` of a frozen dataclass holds its fields in declaration order
    (``__init__`` sets them in that order), which is the key order this module promises. A cell of several replicas
    merges their traces, each line ending with the ``replica`` that wrote it."""
    tag = {} if replica is None else {"replica": replica}
    return json_line({"kind": event.kind, **vars(event), **tag})


def json_line(payload: Mapping[str, object]) -> str:
    """``payload`` as a trace line; for lines of no kind above (a test's probe events), in the same format."""
    return json.dumps(payload, separators=_SEPARATORS) + "\n"


def trace_bytes(events: Iterable[TraceEvent], replicas: Iterable[int] | None = None) -> bytes:
    """A trace file's contents: one line per event, in order, with the replica of each where there are several."""
    if replicas is None:
        return "".join(map(trace_line, events)).encode()
    return "".join(map(trace_line, events, replicas)).encode()


def merged_traces(traces: Sequence[bytes]) -> bytes:
    """One trace of a cell of several replicas from each replica's own (``traces[r]`` is replica ``r``'s): every line
    tagged with its ``replica``, all of them in time order (a replica's lines keep their order among equal times)."""
    lines = []
    for replica, data in enumerate(traces):
        for line in data.splitlines():
            if line.strip():
                payload = json.loads(line)
                lines.append((payload.get("t", 0.0), replica, json_line({**payload, "replica": replica})))
    return "".join(line for _, _, line in sorted(lines, key=lambda entry: (entry[0], entry[1]))).encode()


KINDS = {kind.kind: kind for kind in (Step, Admit, Finish, Unpin, Evict)}


def evicted_blocks(data: bytes) -> int:
    """The cached blocks a trace's ``Evict`` events count."""
    return sum(event.num_blocks for event in read_trace(data, (Evict.kind,)))


def released_pins(events: Iterable[TraceEvent]) -> dict[tuple[str, int], Unpin]:
    """The ``Unpin`` that ended each pin, keyed by the job and turn whose finish pinned it. A pin the trace never
    saw released is left out."""
    pinned_turn: dict[str, int] = {}
    releases = {}
    for event in events:
        if isinstance(event, Finish) and event.action.is_pin and event.job_id is not None and event.turn is not None:
            pinned_turn[event.job_id] = event.turn
        elif isinstance(event, Unpin) and event.job_id in pinned_turn:
            releases[(event.job_id, pinned_turn.pop(event.job_id))] = event
    return releases


def pin_releases(events: Iterable[TraceEvent]) -> dict[tuple[str, int], UnpinReason]:
    """How each pin ended: the reason of the ``Unpin`` that released it (``next_turn`` when the job's next turn
    arrived while its blocks were still held), keyed as ``released_pins``."""
    return {key: unpin.reason for key, unpin in released_pins(events).items()}


def read_trace(data: bytes, kinds: Iterable[str] | None = None) -> list[TraceEvent]:
    """The events of a trace file's contents, in order; lines of other kinds (a test's probe events) are left out,
    and with ``kinds`` every kind but those (a cell's steps are most of its lines and take most of the parsing)."""
    wanted = None if kinds is None else tuple(f'"kind":"{kind}"'.encode() for kind in kinds)
    events = []
    for line in data.splitlines():
        if not line.strip() or (wanted is not None and not any(mark in line for mark in wanted)):
            continue
        payload = json.loads(line)
        payload.pop("replica", None)  # the merged trace of a cell of several replicas
        kind = KINDS.get(payload.pop("kind", None))
        if kind is Finish:
            payload["action"] = FinishAction(payload["action"])
        elif kind is Unpin:
            payload["reason"] = UnpinReason(payload["reason"])
        if kind is not None:
            events.append(kind(**payload))
    return events
