"""The simulation's events and their one heap (pure), in the manner of Vidur's event loop: the heap is ordered by
``(at, priority, seq)``; the loop (``sim.loop``) pops the first, sets the clock, handles it and pushes the events
its handling causes. An event is a value: what it does is the simulation's (``Simulation.handle``), so the events
know nothing of the loop that handles them.

- ``SendTurn``: a client sends its job's next turn (at the plan's arrival, or when a tool call ends);
- ``ReachEngine``: the request reaches the engine after the API server's overhead and waits there;
- ``Deadline``: the client gives up on a request not finished by then, and the engine aborts it;
- ``ScheduleStep``: the engine schedules a step from its queues and runs it, then plans the pure decode steps that
  follow (``sim.decode_run``), which the next event for its replica applies as far as it reaches.

Each event belongs to one replica (a send, to the one its router chooses) and is handled on that replica's clock.
At the same time, sends and arrivals come first (in the order they were pushed), then deadlines (so a request that
reached the engine by its deadline is aborted there), then the engine (so it sees everything due by then). Every
event has the engine look at its queues at its time, even one that changes nothing (a deadline of a request already
answered): a pin whose TTL ran out meanwhile is released then.
"""

from __future__ import annotations

import enum
import heapq
from dataclasses import dataclass
from typing import ClassVar

from orchestrator.mechanisms.request import SimRequest
from orchestrator.sim.clients import Job


class Priority(enum.IntEnum):
    """Order among events at the same time; within one priority, the order they were pushed."""

    CLIENT = 0  # sends and arrivals, as the workload plan orders them
    DEADLINE = 1  # after the arrivals due by then: a request that reached the engine is aborted there
    ENGINE = 2  # the engine schedules once everything due by then has happened


@dataclass(frozen=True, eq=False)
class Event:
    """Something that happens at ``at``; handling it causes no event before the simulation's clock."""

    priority: ClassVar[Priority]
    at: float


@dataclass(frozen=True, eq=False)
class SendTurn(Event):
    """A client sends its job's next turn: at the plan's arrival for turn 1, when the tool call ends after that."""

    priority: ClassVar[Priority] = Priority.CLIENT
    job: Job


@dataclass(frozen=True, eq=False)
class ReachEngine(Event):
    """A request reaches the engine and waits there, unless its client has given up on it already."""

    priority: ClassVar[Priority] = Priority.CLIENT
    request: SimRequest


@dataclass(frozen=True, eq=False)
class Deadline(Event):
    """The client gives up on a request not finished by ``deadline_at``: the engine aborts it and the job ends as
    timed out. ``at`` is when this is handled, ``deadline_at`` what the records say."""

    priority: ClassVar[Priority] = Priority.DEADLINE
    request: SimRequest
    deadline_at: float


@dataclass(frozen=True, eq=False)
class ScheduleStep(Event):
    """Replica ``replica``'s engine schedules from its queues and runs the step to completion, or waits for the next
    change. Only the engine's ``next_schedule`` acts: one planned for later and then brought forward is stale."""

    priority: ClassVar[Priority] = Priority.ENGINE
    replica: int = 0


class EventQueue:
    """The simulation's one heap, ordered by ``(at, priority, seq)``. ``seq`` counts this queue's pushes, so the order
    is total and the same on every run."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, Priority, int, Event]] = []
        self._num_pushed = 0

    def __bool__(self) -> bool:
        return bool(self._heap)

    def push(self, event: Event) -> None:
        self._num_pushed += 1
        heapq.heappush(self._heap, (event.at, event.priority, self._num_pushed, event))

    def pop(self) -> Event:
        return heapq.heappop(self._heap)[-1]
