"""The simulated engine in virtual time: the agent workload's clients, one vLLM engine, its host link.

An event loop in the manner of Vidur's: the engine runs one step after another while it has work; each
step's duration comes from the roofline (``hardware.StepCost``) plus whatever the CPU tier makes it wait
for; between steps, every client request that has become due reaches the engine. When the engine has
nothing it can run, virtual time jumps to the next thing that can change that (an arrival, a pin's
expiry, a load landing, a timeout). Nothing here reads the wall clock or draws a random number: the
arrival schedule is the workload plan's, so the same cell always gives the same records.

Output is what a real cell produces: request and job records on the cell's clock (zero = start of the
arrival window) and a scheduler trace with the same events as the tracing scheduler plugin.
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field

from orchestrator.records.schema import JobRecord, JobStatus, RequestRecord, RequestStatus
from orchestrator.sim.hardware import StepCost
from orchestrator.sim.scheduler import SchedulerConfig, SimRequest, SimScheduler, StepPlan, TierKind
from orchestrator.workload.plan import job_id_for, poisson_arrivals
from orchestrator.workload.spec import WorkloadSpec

LMCACHE_CHUNK_TOKENS = 256
_SEND, _REACH = 0, 1  # a client sends a job's next turn; a request reaches the engine


@dataclass(frozen=True)
class SimEngine:
    """Everything the simulator needs to know about the engine under test."""

    scheduler: SchedulerConfig
    cost: StepCost


@dataclass
class SimStats:
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
    requests: list[RequestRecord]
    jobs: list[JobRecord]
    trace: list[dict]
    stats: SimStats

    def trace_bytes(self) -> bytes:
        return "".join(json.dumps(event, separators=(",", ":")) + "\n" for event in self.trace).encode()


class _Link:
    """One direction of the PCIe link: copies queue behind each other."""

    def __init__(self) -> None:
        self.busy_until = 0.0

    def transfer(self, start: float, seconds: float) -> float:
        """Queue a copy of ``seconds`` at ``start``; returns when it completes."""
        self.busy_until = max(start, self.busy_until) + seconds
        return self.busy_until


@dataclass
class _Job:
    job_id: str
    index: int
    arrival: float
    deadline: float
    turn: int = 0
    records: list[RequestRecord] = field(default_factory=list)


class Simulation:
    def __init__(self, workload: WorkloadSpec, engine: SimEngine):
        self.workload = workload
        self.engine = engine
        self.cost = engine.cost
        self.scheduler = SimScheduler(engine.scheduler)
        self.targets = workload.target_prompt_tokens()
        self.now = 0.0
        self._events: list[tuple[float, int, int, object]] = []
        self._sequence = 0
        self._deadlines: list[tuple[float, int, SimRequest]] = []
        self._h2d, self._d2h = _Link(), _Link()
        self.stats = SimStats()
        self.trace: list[dict] = []
        self.requests: list[RequestRecord] = []
        self.jobs: list[JobRecord] = []
        self._job_of: dict[str, _Job] = {}

    def run(self) -> SimResult:
        spec = self.workload
        for index, offset in enumerate(poisson_arrivals(spec.jps, spec.duration_s, spec.seed)):
            job = _Job(job_id_for(spec.seed, index), index, offset, offset + spec.job_timeout_s)
            self._job_of[job.job_id] = job
            self._push(offset, _SEND, job)
        while True:
            self._deliver_due()
            self._expire(self.now)
            if not (self._events or self.scheduler.has_work):
                break
            plan = self.scheduler.schedule(self.now)
            self._trace_unpins(plan.unpins)
            if plan.scheduled or plan.async_loads:
                self._step(plan)
                continue
            next_change = self._next_change()
            if next_change is None:
                break
            self.now = next_change
        self._finish_stats()
        return SimResult(self.requests, self.jobs, self.trace, self.stats)

    # Time.
    def _push(self, at: float, kind: int, payload: object) -> None:
        self._sequence += 1
        heapq.heappush(self._events, (at, self._sequence, kind, payload))

    def _deliver_due(self) -> None:
        while self._events and self._events[0][0] <= self.now:
            at, _, kind, payload = heapq.heappop(self._events)
            if kind == _SEND:
                self._send(payload, at)
            elif not payload.done:
                payload.in_engine = True
                self.scheduler.add(payload)

    def _next_change(self) -> float | None:
        """The next moment the engine could do something, when it can do nothing now."""
        candidates = [at for at, *_ in self._events[:1]] + [at for at, *_ in self._deadlines[:1]]
        if self.scheduler.pins is not None:
            candidates.append(self.scheduler.pins.next_expiry())
        candidates += [request.ready_at for request in self.scheduler.running]
        future = [at for at in candidates if at is not None and at > self.now]
        return min(future, default=None)

    # Clients.
    def _send(self, job: _Job, due: float) -> None:
        spec = self.workload
        job.turn += 1
        request = SimRequest(
            request_id=f"{job.job_id}-t{job.turn}",
            job_id=job.job_id,
            job_index=job.index,
            turn=job.turn,
            is_last=job.turn == spec.num_turns,
            prompt_tokens=self.targets[job.turn - 1],
            arrival=due + self.cost.calibration.request_overhead_s,
            scheduled_at=due,
        )
        self._sequence += 1
        heapq.heappush(self._deadlines, (min(due + spec.request_timeout_s, job.deadline), self._sequence, request))
        self._push(request.arrival, _REACH, request)

    # The engine.
    def _step(self, plan: StepPlan) -> None:
        scheduler, cost = self.scheduler, self.cost
        start = self.now
        tokens = pairs = context = 0
        save_tokens = save_chunks = 0
        for request, num_new, before in plan.scheduled:
            tokens += num_new
            pairs += num_new * (before + (num_new + 1) / 2)
            context += before + num_new
            saved = scheduler.save_prompt(request, num_new, before)
            if saved:
                save_tokens += saved
                save_chunks += math.ceil(saved / LMCACHE_CHUNK_TOKENS)
        forward = cost.forward_s(tokens, pairs, context, len(plan.scheduled)) if plan.scheduled else 0.0
        forward_end = start + forward
        if plan.loads:
            # LMCache loads layer by layer beside the forward pass (wait_for_layer_load): the step ends
            # when both are done, so only a load longer than the compute stalls it.
            loaded = sum(num for _, num in plan.loads)
            landed = self._h2d.transfer(start, cost.copy_s(loaded))
            self.stats.load_stall_s += max(0.0, landed - forward_end)
            forward_end = max(forward_end, landed)
            self._count_loads(loaded, len(plan.loads))
        for request, num_tokens in plan.async_loads:
            request.ready_at = self._h2d.transfer(start, cost.copy_s(num_tokens))
            self._count_loads(num_tokens, 1)
        save_stall = 0.0
        if save_tokens:
            copied = self._d2h.transfer(start, cost.copy_s(save_tokens))
            self.stats.tier_store_bytes += save_tokens * cost.kv_bytes_per_token
            if scheduler.config.tier is TierKind.LMCACHE:  # wait_for_save: the copies, syncs and bookkeeping
                calibration = cost.calibration
                sync = calibration.lmcache_save_step_s + calibration.lmcache_save_chunk_s * save_chunks
                save_stall = max(copied, forward_end) - forward_end + sync
        self.now = forward_end + save_stall
        self.stats.steps += 1
        self.stats.busy_s += self.now - start
        self.stats.save_stall_s += save_stall
        self._trace_admissions(plan.admitted, start)
        prefill = decode = 0
        for request, num_new, before in plan.scheduled:
            step_prefill = max(0, min(num_new, request.prompt_tokens - before))
            prefill += step_prefill
            decode += num_new - step_prefill
            if request.num_computed >= request.num_tokens and not request.done:
                request.num_output += 1
                if request.first_token_at is None:
                    request.first_token_at = self.now
                if request.num_output >= scheduler.config.output_tokens:
                    self._finish(request)
        self.trace.append({
            "kind": "step", "t": self.now, "step": self.stats.steps, "running": len(scheduler.running),
            "waiting": len(scheduler.waiting), "scheduled": len(plan.scheduled), "prefill_tokens": prefill,
            "decode_tokens": decode, "context_tokens": context, "attention_pairs": pairs,
            "free_blocks": scheduler.pool.num_free,
            "pinned_blocks": scheduler.num_pinned_blocks, "preempted": plan.preempted,
        })  # fmt: skip
        self._expire(self.now)

    def _finish(self, request: SimRequest) -> None:
        unpins: list = []
        self.scheduler.finish(request, self.now, unpins)
        kept = self.scheduler.pins is not None and request.job_id in self.scheduler.pins
        self.trace.append({
            "kind": "finish", "t": self.now, "request_id": request.request_id, "job_id": request.job_id,
            "turn": request.turn, "is_last": request.is_last, "action": "pin" if kept else "free",
            "free_blocks": self.scheduler.pool.num_free,
        })  # fmt: skip
        self._trace_unpins(unpins)
        job = self._job_of[request.job_id]
        self._record(job, request, RequestStatus.OK, self.now, None)
        if request.is_last:
            self._end_job(job, JobStatus.COMPLETED)
        else:
            self._push(self.now + self.workload.tool_time_s, _SEND, job)

    def _expire(self, now: float) -> None:
        """Requests whose client deadline has passed are aborted and their jobs end as timed out."""
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, request = heapq.heappop(self._deadlines)
            if request.done:
                continue
            request.done = True
            if request.in_engine:
                unpins: list = []
                self.scheduler.abort(request, unpins)
                self._trace_unpins(unpins)
            job = self._job_of[request.job_id]
            self._record(job, request, RequestStatus.TIMEOUT, deadline, "no complete answer before the deadline")
            self._end_job(job, JobStatus.TIMEOUT)

    # Records.
    def _record(self, job: _Job, request: SimRequest, status: RequestStatus, finished_at: float, error: str | None):
        previous = job.records[-1] if job.records else None
        ok = status is RequestStatus.OK
        record = RequestRecord(
            job_id=job.job_id,
            job_index=job.index,
            turn=request.turn,
            is_last=request.is_last,
            status=status,
            scheduled_at=request.scheduled_at,
            sent_at=request.scheduled_at,
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
            job_id=job.job_id, job_index=job.index, status=status, arrival_at=job.arrival,
            finished_at=job.records[-1].finished_at, num_turns_completed=sum(r.status.is_ok for r in job.records),
        ))  # fmt: skip

    # Trace.
    def _trace_admissions(self, admitted: list[SimRequest], at: float) -> None:
        for request in admitted:
            self.trace.append({
                "kind": "admit", "t": at, "request_id": request.request_id, "job_id": request.job_id,
                "turn": request.turn, "prompt_tokens": request.prompt_tokens,
                "cached_tokens": request.cached_tokens, "free_blocks": self.scheduler.pool.num_free,
            })  # fmt: skip

    def _trace_unpins(self, unpins: list) -> None:
        for pin, reason in unpins:
            self.trace.append({
                "kind": "unpin", "t": self.now, "job_id": pin.job_id, "reason": reason,
                "num_blocks": len(pin.blocks), "held_s": self.now - pin.pinned_at,
                "free_blocks": self.scheduler.pool.num_free,
            })  # fmt: skip

    def _count_loads(self, num_tokens: int, num_requests: int) -> None:
        self.stats.tier_load_bytes += num_tokens * self.cost.kv_bytes_per_token
        self.stats.tier_hits += num_requests

    def _finish_stats(self) -> None:
        stats = self.stats
        stats.preemptions = self.scheduler.num_preemptions
        stats.evicted_blocks = self.scheduler.pool.evicted_blocks
        if self.scheduler.tier is not None:
            stats.tier_counters = {
                "kv_offload_store_bytes": stats.tier_store_bytes,
                "kv_offload_load_bytes": stats.tier_load_bytes,
                "external_prefix_cache_hits": float(stats.tier_hits),
            }


def simulate(workload: WorkloadSpec, engine: SimEngine) -> SimResult:
    return Simulation(workload, engine).run()
