"""One simulated cell in virtual time: the clients (``sim.clients``), its replicas' engines (``sim.engine``), the
router between them (``routing.rules``) and the event loop (``sim.events``). The loop pops the first event and
handles it; the handler sets its replica's clock and returns what it causes. A replica's clock never goes back, so
what fell due at a replica during its engine's step is handled when the step ends, in time order (a request that
reached the engine during a step and passed its deadline during it too is aborted in the engine, as vLLM aborts a
request its client dropped), while the other replicas go on at their own times.

Output is what a real cell produces: request and job records on the cell's clock and a scheduler trace.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from orchestrator.mechanisms.request import SimRequest
from orchestrator.records.cell import SimStats
from orchestrator.records.scheduler_trace import TraceEntry, TraceEvent, expanded, trace_bytes
from orchestrator.records.schema import JobRecord, RequestRecord
from orchestrator.routing.rules import RouteRequest, RouterKind, RouterSetup, make_router
from orchestrator.sim.clients import Clients
from orchestrator.sim.engine import EngineCore, SimEngine
from orchestrator.sim.events import Deadline, Event, EventQueue, ReachEngine, ScheduleStep, SendTurn
from orchestrator.workload.schedule import Schedule, schedule_for
from orchestrator.workload.spec import WorkloadSpec


@dataclass
class SimResult:
    """What a real cell gives: the records in the order they were written, and the scheduler trace (each replica's,
    its decode runs kept whole; ``scheduler_trace`` merges and expands them)."""

    requests: list[RequestRecord]
    jobs: list[JobRecord]
    stats: SimStats
    replica_scheduler_traces: list[list[TraceEntry]]

    @cached_property
    def _merged(self) -> tuple[list[TraceEvent], list[int] | None]:
        """The cell's trace in time order, and each event's replica in a cell of several (a replica's events keep
        their order among equal times, and replica 0's come first)."""
        if len(self.replica_scheduler_traces) == 1:
            return list(expanded(self.replica_scheduler_traces[0])), None
        tagged = sorted(((event, replica) for replica, entries in enumerate(self.replica_scheduler_traces)
                         for event in expanded(entries)), key=lambda pair: pair[0].t)  # fmt: skip
        return [event for event, _ in tagged], [replica for _, replica in tagged]

    @property
    def scheduler_trace(self) -> list[TraceEvent]:
        return self._merged[0]

    @property
    def scheduler_trace_replicas(self) -> list[int] | None:
        return self._merged[1]

    def scheduler_trace_bytes(self) -> bytes:
        return trace_bytes(self.scheduler_trace, self.scheduler_trace_replicas)


@dataclass(frozen=True)
class Replicas:
    """How many engines a cell runs and the router in front of them (none for one)."""

    count: int = 1
    router: RouterKind | None = None
    seed: int = 0  # draws least-loaded's pairs

    def __post_init__(self) -> None:
        if self.count < 1 or (self.count > 1 and self.router is None):
            raise ValueError(f"{self.count} replicas with router {self.router}; valid: 1 replica, or more with a "
                             f"router ({', '.join(RouterKind)})")  # fmt: skip


class Simulation:
    """One cell: the clients, the replicas' engines, the router and the event loop between them.

    Invariants: a replica's ``clocks`` entry never decreases (its events set it, and a step moves it to the step's
    end); ``now`` is the clock of the replica whose event is being handled; ``next_schedule[r]`` is the one
    ``ScheduleStep`` of replica ``r`` that will act (others pending are stale); ``num_in_flight[r]`` counts the
    requests routed to ``r`` that have not finished or been given up on, which is what the router balances."""

    def __init__(self, workload: WorkloadSpec, engine: SimEngine, schedule: Schedule | None = None,
                 replicas: Replicas = Replicas()):  # fmt: skip
        schedule = schedule or schedule_for(workload)
        self.clients = Clients(workload, schedule, engine.cost.calibration.request_overhead_s,
                                engine.scheduler.block_size)
        self.engines = [EngineCore(engine) for _ in range(replicas.count)]
        self.router = None if replicas.router is None else make_router(
            replicas.router, RouterSetup(replicas.count, replicas.seed, capacity_blocks=engine.scheduler.num_blocks))
        self.block_size = engine.scheduler.block_size
        self.now = 0.0
        self.clocks = [0.0] * replicas.count
        self.next_schedule: list[ScheduleStep | None] = [None] * replicas.count
        self.num_in_flight = [0] * replicas.count
        self._queue = EventQueue()

    def run(self) -> SimResult:
        for at, job in self.clients.start():
            self._queue.push(SendTurn(at, job))
        while self._queue:
            for caused in self.handle(self._queue.pop()):
                self._queue.push(caused)
        stats = [engine.finish_stats() for engine in self.engines]
        return SimResult(self.clients.requests, self.clients.jobs, stats[0] if len(stats) == 1 else SimStats.summed(stats),
                         [engine.scheduler_trace for engine in self.engines])  # fmt: skip

    def handle(self, event: Event) -> Iterable[Event]:
        """Apply ``event`` (``sim.events`` says what each means) and return the events it causes."""
        match event:  # the most frequent first
            case ScheduleStep():
                return self._schedule_step(event)
            case ReachEngine():
                return self._reach_engine(event)
            case Deadline():
                return self._deadline(event)
            case SendTurn():
                return self._send_turn(event)
        raise TypeError(f"no handler for {type(event).__name__}")

    def _send_turn(self, send: SendTurn) -> list[Event]:
        request, deadline_at = self.clients.send(send.job, send.at)
        self.route(request)
        self.advance(request.replica, send.at)
        # A deadline already past (the job's own ran out during its tool call) fires now, after the arrivals due now.
        deadline = Deadline(max(deadline_at, self.now), request, deadline_at)
        return [ReachEngine(request.arrival, request), deadline, *self.schedule_at(self.now, request.replica)]

    def _reach_engine(self, arrival: ReachEngine) -> list[ScheduleStep]:
        request = arrival.request
        self.advance(request.replica, arrival.at)
        self.clients.num_on_the_way -= 1
        if not request.done:
            self.engines[request.replica].add(request)
        return self.schedule_at(self.now, request.replica)

    def _deadline(self, deadline: Deadline) -> list[ScheduleStep]:
        request = deadline.request
        self.advance(request.replica, deadline.at)
        if not request.done:
            request.done = True
            self.on_left(request)
            if request.in_engine:
                self.engines[request.replica].abort(request, self.now)
            self.clients.on_timed_out(request, deadline.deadline_at)
        return self.schedule_at(self.now, request.replica)

    def _schedule_step(self, step: ScheduleStep) -> list[Event]:
        replica = step.replica
        if step is not self.next_schedule[replica]:
            return []
        self.advance(replica, step.at)
        self.next_schedule[replica] = None
        engine = self.engines[replica]
        if not (self.clients.num_on_the_way or engine.has_work):
            return []  # the run is over: a deadline or a pin's expiry alone does not keep it going
        plan = engine.schedule(self.now)
        if not (plan.scheduled or plan.async_loads):
            change_at = engine.next_change(self.now)
            return [] if change_at is None else self.schedule_at(change_at, replica)
        end, finished = engine.step(plan, self.now)  # the step runs to completion
        self.advance(replica, end)
        caused: list[Event] = []
        for request in finished:
            self.on_left(request)
            caused += [SendTurn(at, job) for at, job in self.clients.on_finished(request, self.now)]
        # Steps of pure decode that follow are planned at once and applied when they end or an event comes first.
        decoded_until = engine.plan_decode_run(self.now)
        return caused + self.schedule_at(self.now if decoded_until is None else decoded_until, replica)

    def advance(self, replica: int, at: float) -> float:
        """Replica ``replica``'s clock at an event due ``at``: what fell due during a step waits for the step's end,
        and the engine's planned decode steps that would have started before ``at`` are applied first."""
        settled = self.engines[replica].settle(at)
        if settled is not None:
            self.clocks[replica] = max(self.clocks[replica], settled)
        self.now = self.clocks[replica] = max(self.clocks[replica], at)
        return self.now

    def route(self, request: SimRequest) -> None:
        if self.router is not None:
            loads = dict(enumerate(self.num_in_flight))
            request.replica = self.router.choose(RouteRequest(request.job_id, self._block_hashes(request)), loads)
        self.num_in_flight[request.replica] += 1

    def on_left(self, request: SimRequest) -> None:
        """The request finished, or its client gave up on it: its replica has one less in flight."""
        self.num_in_flight[request.replica] -= 1

    def schedule_at(self, at: float, replica: int = 0) -> list[ScheduleStep]:
        """The replica's engine schedules at ``at`` unless it already will by then (a later one planned is stale)."""
        planned = self.next_schedule[replica]
        if planned is not None and planned.at <= at:
            return []
        planned = self.next_schedule[replica] = ScheduleStep(at, replica)
        return [planned]

    def _block_hashes(self, request: SimRequest) -> tuple:
        """The prompt's full blocks as a prefix-aware router hashes them: the shared ones, then its job's chain (a
        job's prompt extends its previous one), for a router that reads them."""
        if self.router is None or not self.router.reads_prefix:
            return ()
        num_full = request.prompt_tokens // self.block_size
        shared = min(request.shared_blocks, num_full)
        own = tuple((request.job_id, i) for i in range(num_full - shared))
        return tuple(("shared", i) for i in range(shared)) + own


def simulate(workload: WorkloadSpec, engine: SimEngine, schedule: Schedule | None = None,
             replicas: Replicas = Replicas()) -> SimResult:  # fmt: skip
    """``workload`` in ``engine`` (on ``replicas`` of it): its ``schedule`` (drawn here when not given) and its
    timeouts."""
    return Simulation(workload, engine, schedule, replicas).run()
