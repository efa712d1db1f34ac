"""The simulated engine in virtual time: the agent workload's clients, one vLLM engine, its host link.

An event loop in the manner of Vidur's: one heap of events ordered by ``(at, priority, seq)``; the loop pops the
first, sets the clock, handles it and pushes the events the handler returns. The events:

- ``SendTurn``: a client sends its job's next turn (at the plan's arrival, or when a tool call ends);
- ``ReachEngine``: the request reaches the engine after the API server's overhead and waits there;
- ``Deadline``: the client gives up on a request not finished by then, and the engine aborts it;
- ``ScheduleStep``: the engine schedules a step from its queues and runs it.

At the same time, sends and arrivals come first (in the order they were pushed), then deadlines (so a request that
reached the engine by its deadline is aborted there), then the engine (so it sees everything due by then). Every
event has the engine look at its queues at its time, even one that changes nothing (a deadline of a request already
answered): a pin whose TTL ran out meanwhile is released then.

The engine is one thread, as vLLM's engine core is: a step runs to completion (its duration from the roofline,
``hardware.StepCost``, plus whatever the CPU tier makes it wait for), and what fell due during it is handled when it
ends, in time order: a request that reached the engine during the step and passed its deadline during it too is
aborted in the engine, as vLLM aborts a request its client dropped. The clock never goes back. When the engine can
run nothing, it looks again at the next thing that could change that: an event, a pin's expiry, a load landing. Nothing here reads the wall clock or draws a random
number: the schedule is the workload's, drawn before the run, so the same cell always gives the same records.

Output is what a real cell produces: request and job records on the cell's clock (zero = start of the arrival
window) and a scheduler trace with the same events as the tracing scheduler plugin.
"""

from __future__ import annotations

import enum
import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from orchestrator.records.schema import JobRecord, JobStatus, RequestRecord, RequestStatus
from orchestrator.records.trace import (
    Admit,
    Finish,
    FinishAction,
    Step,
    TraceEvent,
    Unpin,
    attention_pairs,
    trace_bytes,
)
from orchestrator.replica.schedulers.pins import Pin
from orchestrator.sim.hardware import StepCost
from orchestrator.sim.scheduler import SchedulerConfig, SimRequest, SimScheduler, StepPlan, TierKind
from orchestrator.workload.schedule import JobShape, Schedule, TurnShape, schedule_for
from orchestrator.workload.spec import WorkloadSpec

LMCACHE_CHUNK_TOKENS = 256


@dataclass(frozen=True)
class SimEngine:
    """Everything the simulator needs to know about the engine under test."""

    scheduler: SchedulerConfig
    cost: StepCost


@dataclass
class SimStats:
    """The engine's counters over the run; the worker reports them with the cell."""

    steps: int = 0
    busy_s: float = 0.0
    preemptions: int = 0
    evicted_blocks: int = 0
    save_stall_s: float = 0.0
    load_stall_s: float = 0.0
    tier_store_bytes: float = 0.0
    tier_load_bytes: float = 0.0
    tier_hits: int = 0
    tier_counters: dict[str, float] = field(default_factory=dict)  # named as the real engine's counters


@dataclass
class SimResult:
    """What a real cell gives: the records in the order they were written, and the scheduler trace."""

    requests: list[RequestRecord]
    jobs: list[JobRecord]
    trace: list[TraceEvent]
    stats: SimStats

    def trace_bytes(self) -> bytes:
        return trace_bytes(self.trace)


# Events.
class Priority(enum.IntEnum):
    """Order among events at the same time; within one priority, the order they were pushed."""

    CLIENT = 0  # sends and arrivals, as the workload plan orders them
    DEADLINE = 1  # after the arrivals due by then: a request that reached the engine is aborted there
    ENGINE = 2  # the engine schedules once everything due by then has happened


@dataclass(frozen=True, eq=False)
class Event:
    """Something that happens at ``at``. ``handle`` applies it and returns the events it causes, none before the
    simulation's clock."""

    priority: ClassVar[Priority]
    at: float

    def handle(self, sim: Simulation) -> Iterable[Event]:
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class SendTurn(Event):
    """A client sends its job's next turn: at the plan's arrival for turn 1, when the tool call ends after that."""

    priority: ClassVar[Priority] = Priority.CLIENT
    job: _Job

    def handle(self, sim: Simulation) -> Iterable[Event]:
        request, deadline_at = sim.clients.send(self.job, self.at)
        # A deadline already past (the job's own ran out during its tool call) fires now, after the arrivals due now.
        deadline = Deadline(max(deadline_at, sim.now), request, deadline_at)
        return [ReachEngine(request.arrival, request), deadline, *sim.schedule_at(sim.now)]


@dataclass(frozen=True, eq=False)
class ReachEngine(Event):
    """A request reaches the engine and waits there, unless its client has given up on it already."""

    priority: ClassVar[Priority] = Priority.CLIENT
    request: SimRequest

    def handle(self, sim: Simulation) -> Iterable[Event]:
        sim.clients.num_on_the_way -= 1
        if not self.request.done:
            sim.engine.add(self.request)
        return sim.schedule_at(sim.now)


@dataclass(frozen=True, eq=False)
class Deadline(Event):
    """The client gives up on a request not finished by ``deadline_at``: the engine aborts it and the job ends as
    timed out. ``at`` is when this is handled, ``deadline_at`` what the records say."""

    priority: ClassVar[Priority] = Priority.DEADLINE
    request: SimRequest
    deadline_at: float

    def handle(self, sim: Simulation) -> Iterable[Event]:
        request = self.request
        if not request.done:
            request.done = True
            if request.in_engine:
                sim.engine.abort(request, sim.now)
            sim.clients.on_timed_out(request, self.deadline_at)
        return sim.schedule_at(sim.now)


@dataclass(frozen=True, eq=False)
class ScheduleStep(Event):
    """The engine schedules from its queues and runs the step to completion, or waits for the next change. Only the
    simulation's ``next_schedule`` acts: one planned for later and then brought forward by an event is stale."""

    priority: ClassVar[Priority] = Priority.ENGINE

    def handle(self, sim: Simulation) -> Iterable[Event]:
        if self is not sim.next_schedule:
            return []
        sim.next_schedule = None
        engine = sim.engine
        if not (sim.clients.num_on_the_way or engine.has_work):
            return []  # the run is over: a deadline or a pin's expiry alone does not keep it going
        plan = engine.schedule(sim.now)
        if not (plan.scheduled or plan.async_loads):
            change_at = engine.next_change(sim.now)
            return [] if change_at is None else sim.schedule_at(change_at)
        sim.now, finished = engine.step(plan, sim.now)  # the step runs to completion
        caused = [event for request in finished for event in sim.clients.on_finished(request, sim.now)]
        return caused + sim.schedule_at(sim.now)


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


# The clients.
@dataclass
class _Job:
    shape: JobShape
    deadline: float
    turn: int = 0
    records: list[RequestRecord] = field(default_factory=list)

    @property
    def job_id(self) -> str:
        return self.shape.job_id

    @property
    def index(self) -> int:
        return self.shape.index


class _Clients:
    """The workload's agent jobs, as the load generator runs them: each sends its turns one after another, a tool call
    apart, and gives up on a turn at its deadline. They write the request and job records, on the cell's clock.

    ``num_on_the_way`` counts the turns decided but not yet in the engine (a tool call running, a request on the wire):
    the ``SendTurn`` and ``ReachEngine`` events pending."""

    def __init__(self, workload: WorkloadSpec, schedule: Schedule, request_overhead_s: float, block_size: int):
        self.workload = workload
        self._schedule = schedule
        self._request_overhead_s = request_overhead_s
        self._block_size = block_size
        self._sent_blocks: set[str] = set()  # a replay's declared blocks sent so far
        self._job_of: dict[str, _Job] = {}
        self.requests: list[RequestRecord] = []
        self.jobs: list[JobRecord] = []
        self.num_on_the_way = 0

    def start(self) -> list[SendTurn]:
        """Every job's first turn, at the schedule's arrival times."""
        sends = []
        for shape in self._schedule.jobs:
            job = _Job(shape, shape.arrival_s + self.workload.job_timeout_s)
            self._job_of[job.job_id] = job
            sends.append(SendTurn(shape.arrival_s, job))
        self.num_on_the_way = len(sends)
        return sends

    def send(self, job: _Job, due: float) -> tuple[SimRequest, float]:
        """The job's next turn, sent at ``due``, and its deadline (the request's own, or the job's if sooner)."""
        job.turn += 1
        turn = job.shape.turns[job.turn - 1]
        shared_blocks = turn.shared_tokens // self._block_size
        request = SimRequest(
            request_id=f"{job.job_id}-t{job.turn}",
            job_id=job.job_id,
            job_index=job.index,
            turn=job.turn,
            is_last=turn.is_last,
            prompt_tokens=turn.prompt_tokens,
            arrival=due + self._request_overhead_s,
            output_tokens=turn.output_tokens,
            shared_blocks=shared_blocks,
            warm_shared_blocks=self._warm_shared_blocks(turn) if self._schedule.is_replay else None,
            max_job_hit_blocks=self._job_hit_blocks(job, shared_blocks),
            due_at=due,
        )
        return request, min(due + self.workload.request_timeout_s, job.deadline)

    def _warm_shared_blocks(self, turn: TurnShape) -> int:
        """A replay's shared blocks that some request sent before this one (the rest are computed now)."""
        num_shared = turn.shared_tokens // self._schedule.block_tokens
        warm = next((i for i, block in enumerate(turn.prefix_blocks[:num_shared]) if block not in self._sent_blocks),
                    num_shared)  # fmt: skip
        self._sent_blocks.update(turn.prefix_blocks[:num_shared])
        return warm * self._schedule.block_tokens // self._block_size

    def _job_hit_blocks(self, job: _Job, shared_blocks: int) -> int | None:
        """A replay's prompt shares with its job's previous one only the blocks both declare (its answer is
        not in the next prompt); a prompt that appends to the previous one can use the whole chain."""
        if not self._schedule.is_replay or job.turn == 1:
            return None
        previous, current = job.shape.turns[job.turn - 2].prefix_blocks, job.shape.turns[job.turn - 1].prefix_blocks
        common = next((i for i, (a, b) in enumerate(zip(previous, current)) if a != b),
                      min(len(previous), len(current)))  # fmt: skip
        return max(0, common * self._schedule.block_tokens // self._block_size - shared_blocks)

    def on_finished(self, request: SimRequest, at: float) -> list[SendTurn]:
        """The answer is complete at ``at``: the job ends, or its tool call runs and the next turn is sent after it."""
        job = self._job_of[request.job_id]
        self._record(job, request, RequestStatus.OK, at, None)
        if request.is_last:
            self._end_job(job, JobStatus.COMPLETED)
            return []
        self.num_on_the_way += 1
        return [SendTurn(at + job.shape.turns[request.turn - 1].tool_time_s, job)]

    def on_timed_out(self, request: SimRequest, deadline_at: float) -> None:
        job = self._job_of[request.job_id]
        self._record(job, request, RequestStatus.TIMEOUT, deadline_at, "no complete answer before the deadline")
        self._end_job(job, JobStatus.TIMEOUT)

    def _record(self, job: _Job, request: SimRequest, status: RequestStatus, finished_at: float, error: str | None):
        previous = job.records[-1] if job.records else None
        ok = status is RequestStatus.OK
        record = RequestRecord(
            job_id=job.job_id,
            job_index=job.index,
            turn=request.turn,
            is_last=request.is_last,
            status=status,
            scheduled_at=request.due_at,
            sent_at=request.due_at,  # a simulated client is never late
            first_token_at=request.first_token_at,
            finished_at=finished_at,
            target_prompt_tokens=request.prompt_tokens,
            prompt_tokens=request.prompt_tokens if ok else None,
            cached_tokens=request.cached_tokens if ok else None,
            best_cached_tokens=0 if previous is None else previous.prompt_tokens + previous.completion_tokens,
            completion_tokens=request.num_output if ok else None,
            error=error,
        )
        job.records.append(record)
        self.requests.append(record)

    def _end_job(self, job: _Job, status: JobStatus) -> None:
        self.jobs.append(JobRecord(
            job_id=job.job_id, job_index=job.index, status=status, arrival_at=job.shape.arrival_s,
            finished_at=job.records[-1].finished_at, num_turns_completed=sum(r.status.is_ok for r in job.records),
        ))  # fmt: skip


# The engine.
class _Link:
    """One direction of the PCIe link: copies queue behind each other."""

    def __init__(self) -> None:
        self.busy_until = 0.0

    def transfer(self, start: float, seconds: float) -> float:
        """Queue a copy of ``seconds`` at ``start``; returns when it completes."""
        self.busy_until = max(start, self.busy_until) + seconds
        return self.busy_until


class _Engine:
    """One vLLM engine: the scheduler over the block pool, the host link, the step's cost, and what the engine itself
    writes (the scheduler trace, the counters)."""

    def __init__(self, engine: SimEngine):
        self.scheduler = SimScheduler(engine.scheduler)
        self.cost = engine.cost
        self._h2d, self._d2h = _Link(), _Link()
        self.stats = SimStats()
        self.trace: list[TraceEvent] = []

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def add(self, request: SimRequest) -> None:
        request.in_engine = True
        self.scheduler.add(request)

    def abort(self, request: SimRequest, now: float) -> None:
        unpins: list[tuple[Pin, str]] = []
        self.scheduler.abort(request, unpins)
        self._trace_unpins(unpins, now)

    def schedule(self, now: float) -> StepPlan:
        plan = self.scheduler.schedule(now)
        self._trace_unpins(plan.unpins, now)
        return plan

    def next_change(self, now: float) -> float | None:
        """When the engine, able to run nothing now, could next run something without a new event: a pin expires or
        a load lands. None when neither is ahead."""
        candidates = [request.ready_at for request in self.scheduler.running]
        if self.scheduler.pins is not None:
            candidates.append(self.scheduler.pins.next_expiry())
        return min((at for at in candidates if at is not None and at > now), default=None)

    def step(self, plan: StepPlan, start: float) -> tuple[float, list[SimRequest]]:
        """Run ``plan`` from ``start`` to completion; returns when it ends and the requests it finished, in order."""
        num_tokens = context = num_saved = num_save_chunks = 0
        pairs = 0  # stays an int when only loads are scheduled: the trace has always written 0 there, not 0.0
        for request, num_new, before in plan.scheduled:
            num_tokens += num_new
            pairs += attention_pairs(num_new, before)
            context += before + num_new
            saved = self.scheduler.save_prompt(request, num_new, before)
            num_saved += saved
            num_save_chunks += math.ceil(saved / LMCACHE_CHUNK_TOKENS)
        forward_s = self.cost.forward_s(num_tokens, pairs, context, len(plan.scheduled)) if plan.scheduled else 0.0
        end = self._wait_for_copies(plan, start, start + forward_s, num_saved, num_save_chunks)
        self.stats.steps += 1
        self.stats.busy_s += end - start
        self._trace_admissions(plan.admitted, start)
        at_schedule = len(self.trace)
        finished, num_prefill = self._emit_tokens(plan, end)
        scheduler = self.scheduler
        # Stamped and placed where the plugin writes a real step, when it is scheduled (before the finishes it
        # causes): the time to the next step is then its cost on both engines.
        self.trace.insert(at_schedule, Step(
            t=start, step=self.stats.steps, running=len(scheduler.running), waiting=len(scheduler.waiting),
            scheduled=len(plan.scheduled), prefill_tokens=num_prefill, decode_tokens=num_tokens - num_prefill,
            context_tokens=context, attention_pairs=pairs, free_blocks=scheduler.pool.num_free,
            pinned_blocks=scheduler.num_pinned_blocks, preempted=plan.preempted,
        ))  # fmt: skip
        return end, finished

    def _wait_for_copies(self, plan: StepPlan, start: float, forward_end: float, num_saved: int,
                         num_save_chunks: int) -> float:  # fmt: skip
        """The step's end: its forward pass, its CPU-tier loads and, under LMCache, its saves."""
        cost, stats = self.cost, self.stats
        if plan.loads:
            # LMCache loads layer by layer beside the forward pass (wait_for_layer_load): the step ends when both
            # are done, so only a load longer than the compute stalls it.
            loaded = sum(num for _, num in plan.loads)
            landed = self._h2d.transfer(start, cost.copy_s(loaded))
            stats.load_stall_s += max(0.0, landed - forward_end)
            forward_end = max(forward_end, landed)
            self._count_loads(loaded, len(plan.loads))
        for request, num_tokens in plan.async_loads:
            request.ready_at = self._h2d.transfer(start, cost.copy_s(num_tokens))
            self._count_loads(num_tokens, 1)
        save_stall = 0.0
        if num_saved:
            copied = self._d2h.transfer(start, cost.copy_s(num_saved))
            stats.tier_store_bytes += num_saved * cost.kv_bytes_per_token
            if self.scheduler.config.tier is TierKind.LMCACHE:  # wait_for_save: the copies, syncs and bookkeeping
                calibration = cost.calibration
                sync = calibration.lmcache_save_step_s + calibration.lmcache_save_chunk_s * num_save_chunks
                save_stall = max(copied, forward_end) - forward_end + sync
        stats.save_stall_s += save_stall
        return forward_end + save_stall

    def _emit_tokens(self, plan: StepPlan, end: float) -> tuple[list[SimRequest], int]:
        """Every scheduled request whose context is computed gets its next token at ``end``; returns the requests
        that finished, in order, and the step's prefill tokens."""
        finished = []
        num_prefill = 0
        for request, num_new, before in plan.scheduled:
            num_prefill += max(0, min(num_new, request.prompt_tokens - before))
            if request.num_computed >= request.num_tokens and not request.done:
                request.num_output += 1
                if request.first_token_at is None:
                    request.first_token_at = end
                if request.num_output >= request.output_tokens:
                    self._finish(request, end)
                    finished.append(request)
        return finished, num_prefill

    def _finish(self, request: SimRequest, now: float) -> None:
        unpins: list[tuple[Pin, str]] = []
        self.scheduler.finish(request, now, unpins)
        kept = self.scheduler.pins is not None and request.job_id in self.scheduler.pins
        self.trace.append(Finish(
            t=now, request_id=request.request_id, job_id=request.job_id, turn=request.turn, is_last=request.is_last,
            action=FinishAction.PIN if kept else FinishAction.FREE, free_blocks=self.scheduler.pool.num_free,
        ))  # fmt: skip
        self._trace_unpins(unpins, now)

    def _trace_admissions(self, admitted: list[SimRequest], at: float) -> None:
        for request in admitted:
            self.trace.append(Admit(
                t=at, request_id=request.request_id, job_id=request.job_id, turn=request.turn,
                prompt_tokens=request.prompt_tokens, cached_tokens=request.cached_tokens,
                free_blocks=self.scheduler.pool.num_free,
            ))  # fmt: skip

    def _trace_unpins(self, unpins: list[tuple[Pin, str]], now: float) -> None:
        for pin, reason in unpins:
            self.trace.append(Unpin(
                t=now, job_id=pin.job_id, reason=reason, num_blocks=len(pin.blocks), held_s=now - pin.pinned_at,
                free_blocks=self.scheduler.pool.num_free,
            ))  # fmt: skip

    def _count_loads(self, num_tokens: int, num_requests: int) -> None:
        self.stats.tier_load_bytes += num_tokens * self.cost.kv_bytes_per_token
        self.stats.tier_hits += num_requests

    def finish_stats(self) -> SimStats:
        stats = self.stats
        stats.preemptions = self.scheduler.num_preemptions
        stats.evicted_blocks = self.scheduler.pool.evicted_blocks
        if self.scheduler.tier is not None:
            stats.tier_counters = {
                "kv_offload_store_bytes": stats.tier_store_bytes,
                "kv_offload_load_bytes": stats.tier_load_bytes,
                "external_prefix_cache_hits": float(stats.tier_hits),
            }
        return stats


# The loop.
class Simulation:
    """One cell: the clients, the engine and the event loop between them.

    Invariants: ``now`` never decreases (the loop sets it, and a step moves it to the step's end); ``next_schedule``
    is the one ``ScheduleStep`` that will act (others pending are stale)."""

    def __init__(self, workload: WorkloadSpec, engine: SimEngine, schedule: Schedule | None = None):
        self.now = 0.0
        schedule = schedule or schedule_for(workload)
        self.clients = _Clients(workload, schedule, engine.cost.calibration.request_overhead_s,
                                engine.scheduler.block_size)
        self.engine = _Engine(engine)
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
