"""One simulated cell in virtual time: the clients (``sim.clients``), one engine (``sim.engine``) and the event
loop between them (``sim.events``). The loop pops the first event, sets the clock, handles it and pushes what it
causes; the clock never goes back, so what fell due during a step is handled when the step ends, in time order (a
request that reached the engine during a step and passed its deadline during it too is aborted in the engine, as
vLLM aborts a request its client dropped).

Output is what a real cell produces: request and job records on the cell's clock and a scheduler trace.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.records.cell import SimStats
from orchestrator.records.schema import JobRecord, RequestRecord
from orchestrator.records.trace import TraceEvent, trace_bytes
from orchestrator.sim.clients import Clients
from orchestrator.sim.engine import EngineCore, SimEngine
from orchestrator.sim.events import EventQueue, ScheduleStep
from orchestrator.workload.schedule import Schedule, schedule_for
from orchestrator.workload.spec import WorkloadSpec


@dataclass
class SimResult:
    """What a real cell gives: the records in the order they were written, and the scheduler trace."""

    requests: list[RequestRecord]
    jobs: list[JobRecord]
    trace: list[TraceEvent]
    stats: SimStats

    def trace_bytes(self) -> bytes:
        return trace_bytes(self.trace)


class Simulation:
    """One cell: the clients, the engine and the event loop between them.

    Invariants: ``now`` never decreases (the loop sets it, and a step moves it to the step's end); ``next_schedule``
    is the one ``ScheduleStep`` that will act (others pending are stale)."""

    def __init__(self, workload: WorkloadSpec, engine: SimEngine, schedule: Schedule | None = None):
        self.now = 0.0
        schedule = schedule or schedule_for(workload)
        self.clients = Clients(workload, schedule, engine.cost.calibration.request_overhead_s,
                                engine.scheduler.block_size)
        self.engine = EngineCore(engine)
        self.next_schedule: ScheduleStep | None = None
        self._queue = EventQueue()

    def run(self) -> SimResult:
        for send in self.clients.start():
            self._queue.push(send)
        while self._queue:
            event = self._queue.pop()
            self.now = max(self.now, event.at)  # what fell due during a step is handled when the step ends
            for caused in event.handle(self):
                self._queue.push(caused)
        return SimResult(self.clients.requests, self.clients.jobs, self.engine.trace, self.engine.finish_stats())

    def schedule_at(self, at: float) -> list[ScheduleStep]:
        """The engine schedules at ``at`` unless it already will by then (a later one planned becomes stale)."""
        if self.next_schedule is not None and self.next_schedule.at <= at:
            return []
        self.next_schedule = ScheduleStep(at)
        return [self.next_schedule]


def simulate(workload: WorkloadSpec, engine: SimEngine, schedule: Schedule | None = None) -> SimResult:
    """``workload`` in ``engine``: its ``schedule`` (drawn here when not given) and its timeouts."""
    return Simulation(workload, engine, schedule).run()
