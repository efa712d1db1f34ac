"""Which waiting request runs first: arrival order (vLLM's FCFS), or the job's arrival (program-level FCFS).

Job order is vLLM's priority scheduling with each request carrying its job's arrival index as its priority, which
the client sends; under it a preemption takes the running request of the latest job, as vLLM's priority scheduler
does, where arrival order takes the last admitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from orchestrator.mechanisms.request_queue import FcfsQueue, PriorityQueue, RequestQueue

if TYPE_CHECKING:
    from orchestrator.mechanisms.request import SimRequest


@dataclass(frozen=True)
class Ordering:
    """Arrival order: vLLM's FCFS."""

    name: ClassVar[str] = "arrival"
    vllm_scheduling_policy: ClassVar[str] = "fcfs"
    # The client sends each request its job's arrival index as priority (and the simulator's configuration
    # records that as ``job_priority``).
    sends_priority: ClassVar[bool] = False

    def priority(self, request: SimRequest) -> int:
        """A simulated request's priority as it arrives (lower runs first)."""
        return 0

    def waiting_queue(self) -> RequestQueue:
        return FcfsQueue()

    def preemption_victim(self, running: Sequence[SimRequest]) -> SimRequest:
        return running[-1]


@dataclass(frozen=True)
class JobOrder(Ordering):
    """The job's arrival order: vLLM's priority scheduling by job arrival index."""

    name = "job"
    vllm_scheduling_policy = "priority"
    sends_priority = True

    def priority(self, request: SimRequest) -> int:
        return request.job_index

    def waiting_queue(self) -> RequestQueue:
        return PriorityQueue()

    def preemption_victim(self, running: Sequence[SimRequest]) -> SimRequest:
        return max(running, key=lambda request: request.sort_key())

