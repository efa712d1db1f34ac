"""The simulated scheduler's waiting queue (pure), one class per policy as vLLM's ``request_queue.py`` has
them: arrival order (FCFS), or a heap by (priority, arrival) under priority scheduling."""

from __future__ import annotations

import heapq
import itertools
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.mechanisms.request import SimRequest


class RequestQueue(ABC):
    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def add(self, request: SimRequest) -> None: ...

    @abstractmethod
    def prepend(self, request: SimRequest) -> None:
        """Put back a preempted request, ahead of the others where the order allows."""

    @abstractmethod
    def peek(self) -> SimRequest: ...

    @abstractmethod
    def pop(self) -> SimRequest: ...

    @abstractmethod
    def remove(self, request: SimRequest) -> None: ...

    @abstractmethod
    def __iter__(self) -> Iterator[SimRequest]: ...

    def job_ids(self) -> Iterator[str]:
        """The waiting requests' jobs, lazily (read only when a rule needs them)."""
        return (request.job_id for request in self)


class FcfsQueue(RequestQueue):
    def __init__(self) -> None:
        self._requests: deque[SimRequest] = deque()

    def __len__(self) -> int:
        return len(self._requests)

    def add(self, request: SimRequest) -> None:
        self._requests.append(request)

    def prepend(self, request: SimRequest) -> None:
        self._requests.appendleft(request)

    def peek(self) -> SimRequest:
        return self._requests[0]

    def pop(self) -> SimRequest:
        return self._requests.popleft()

    def remove(self, request: SimRequest) -> None:
        self._requests.remove(request)

    def __iter__(self) -> Iterator[SimRequest]:
        return iter(self._requests)


class PriorityQueue(RequestQueue):
    """By (priority, arrival), then insertion order; a preempted request goes back by its priority."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, SimRequest]] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, request: SimRequest) -> None:
        heapq.heappush(self._heap, (request.priority, request.arrival, next(self._order), request))

    def prepend(self, request: SimRequest) -> None:
        self.add(request)

    def peek(self) -> SimRequest:
        return self._heap[0][3]

    def pop(self) -> SimRequest:
        return heapq.heappop(self._heap)[3]

    def remove(self, request: SimRequest) -> None:
        self._heap = [entry for entry in self._heap if entry[3] is not request]
        heapq.heapify(self._heap)

    def __iter__(self) -> Iterator[SimRequest]:
        return (entry[3] for entry in self._heap)
