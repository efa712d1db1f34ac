"""The simulated vLLM engine (pure): the scheduler over the block pool, the host link, the step's cost, and
what the engine itself writes (the scheduler trace with the same events as the tracing scheduler plugin, and its
counters).

The engine is one thread, as vLLM's engine core is: a step runs to completion (its duration from the roofline,
``hardware.StepCost``, plus whatever the CPU tier makes it wait for), and what fell due during it is handled when it
ends (``sim.loop``). When it can run nothing, it says when it next could without a new event: a pin's expiry or a
load landing. Nothing here reads the wall clock.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from orchestrator.cell.sim_config import SchedulerConfig, SimEngineConfig
from orchestrator.mechanisms.request import SimRequest
from orchestrator.records.cell import SimStats
from orchestrator.records.scheduler_trace import (
    Admit,
    DecodeSteps,
    Finish,
    FinishAction,
    Step,
    TraceEntry,
    Unpin,
    attention_pairs,
)
from orchestrator.roofline.hardware import StepCost
from orchestrator.sim.decode_run import DecodeRun, plan_decode_run
from orchestrator.sim.kv_cache import Release
from orchestrator.sim.scheduler import SimMechanisms, SimScheduler, StepPlan


@dataclass(frozen=True)
class SimEngine:
    """Everything the simulator needs to know about the engine under test."""

    scheduler: SchedulerConfig
    cost: StepCost
    mechanisms: SimMechanisms

    @property
    def config(self) -> SimEngineConfig:
        return SimEngineConfig(scheduler=self.scheduler, calibration=self.cost.calibration)


class _Link:
    """One direction of the PCIe link: copies queue behind each other."""

    def __init__(self) -> None:
        self.busy_until = 0.0

    def transfer(self, start: float, seconds: float) -> float:
        """Queue a copy of ``seconds`` at ``start``; returns when it completes."""
        self.busy_until = max(start, self.busy_until) + seconds
        return self.busy_until


class EngineCore:
    """One vLLM engine: the scheduler over the block pool, the host link, the step's cost, and what the engine itself
    writes (the scheduler trace, the counters)."""

    def __init__(self, engine: SimEngine):
        self.scheduler = SimScheduler(engine.scheduler, engine.mechanisms)
        self.cost = engine.cost
        self._h2d, self._d2h = _Link(), _Link()
        self.stats = SimStats()
        self.scheduler_trace: list[TraceEntry] = []  # decode runs kept whole (``records.scheduler_trace.DecodeSteps``)
        self._decode_run: DecodeRun | None = None

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def add(self, request: SimRequest) -> None:
        request.in_engine = True
        self.scheduler.add(request)

    def abort(self, request: SimRequest, now: float) -> None:
        self._trace_unpins(self.scheduler.abort(request), now)

    def schedule(self, now: float) -> StepPlan:
        plan = self.scheduler.schedule(now)
        self._trace_unpins(plan.unpins, now)
        return plan

    def next_change(self, now: float) -> float | None:
        """When the engine, able to run nothing now, could next run something without a new event: a pin expires or
        a load lands. None when neither is ahead."""
        candidates = [request.ready_at for request in self.scheduler.running]
        candidates.append(self.scheduler.retention.next_expiry())
        return min((at for at in candidates if at is not None and at > now), default=None)

    def step(self, plan: StepPlan, start: float) -> tuple[float, list[SimRequest]]:
        """Run ``plan`` from ``start`` to completion; returns when it ends and the requests it finished, in order."""
        num_tokens = context = 0
        pairs = 0  # stays an int when only loads are scheduled: the trace has always written 0 there, not 0.0
        saves = []  # prompt tokens each scheduled request saved to the CPU tier
        for request, num_new, before in plan.scheduled:
            num_tokens += num_new
            pairs += attention_pairs(num_new, before)
            context += before + num_new
            saves.append(self.scheduler.connector.save_prompt(request, num_new, before))
        forward_s = self.cost.forward_s(num_tokens, pairs, context, len(plan.scheduled)) if plan.scheduled else 0.0
        end = self._wait_for_copies(plan, start, start + forward_s, saves)
        self.stats.steps += 1
        self.stats.busy_s += end - start
        self._trace_admissions(plan.admitted, start)
        at_schedule = len(self.scheduler_trace)
        finished, num_prefill = self._emit_tokens(plan, end)
        scheduler = self.scheduler
        # Stamped and placed where the plugin writes a real step, when it is scheduled (before the finishes it
        # causes): the time to the next step is then its cost on both engines.
        self.scheduler_trace.insert(at_schedule, Step(
            t=start, step=self.stats.steps, running=len(scheduler.running), waiting=len(scheduler.waiting),
            scheduled=len(plan.scheduled), prefill_tokens=num_prefill, decode_tokens=num_tokens - num_prefill,
            context_tokens=context, attention_pairs=pairs, free_blocks=scheduler.pool.num_free,
            pinned_blocks=scheduler.num_pinned_blocks, preempted=plan.preempted,
        ))  # fmt: skip
        return end, finished

    def plan_decode_run(self, now: float) -> float | None:
        """Plan the pure decode steps that follow ``now`` (``sim.decode_run``); returns when they would end, or None
        when the next step is not one. Until ``settle``, the engine's state is that of ``now``."""
        self._decode_run = plan_decode_run(self.scheduler, self.cost, now)
        return None if self._decode_run is None else self._decode_run.end

    def settle(self, at: float) -> float | None:
        """An event reaches the engine at ``at``: the planned steps that would have started before it are applied,
        and the rest dropped (the engine schedules again from there). Returns when the last applied step ended, or
        None if none was."""
        run, self._decode_run = self._decode_run, None
        if run is None:
            return None
        num_applied = bisect.bisect_left(run.starts, at)
        if num_applied == 0:
            return None
        scheduler = self.scheduler
        scheduler.apply_decode_steps(run.batch, num_applied, run.allocations)
        for request in run.batch:
            request.num_output += num_applied
        stats = self.stats
        self.scheduler_trace.append(DecodeSteps(
            first_step=stats.steps + 1, running=len(run.batch), context_tokens=run.context_tokens,
            pinned_blocks=scheduler.num_pinned_blocks, starts=tuple(run.starts[:num_applied]),
            free_blocks=tuple(run.free_blocks[:num_applied]),
        ))  # fmt: skip
        stats.steps += num_applied
        for start, end in zip(run.starts[:num_applied], run.ends):
            stats.busy_s += end - start
        return run.ends[num_applied - 1]

    def _wait_for_copies(self, plan: StepPlan, start: float, forward_end: float, saves: list[int]) -> float:
        """The step's end: its forward pass, the tier's own work in the step (its copies are part of that work, so they
        are laid beside the forward pass after it), and whatever of its CPU-tier loads and saves the tier makes it wait
        for."""
        cost, stats, tier = self.cost, self.stats, self.scheduler.connector.tier
        computes_prompt = any(before < request.prompt_tokens for request, _, before in plan.scheduled)
        work = tier.step_work_s(cost.calibration, computes_prompt, saves, [load.num_tokens for load in plan.loads])
        stats.save_stall_s += work
        forward_end += work
        if plan.loads:
            # Loads that land before the step ends run layer by layer beside the forward pass (LMCache's
            # wait_for_layer_load): the step ends when both are done, so only a load longer than the compute stalls it.
            loaded = sum(load.num_tokens for load in plan.loads)
            slow = sum(load.num_slow_tokens for load in plan.loads)
            landed = self._h2d.transfer(start, tier.load_s(cost, loaded, slow))
            stats.load_stall_s += max(0.0, landed - forward_end)
            forward_end = max(forward_end, landed)
            self._count_loads(loaded)
        for load in plan.async_loads:
            load.request.ready_at = self._h2d.transfer(start, tier.load_s(cost, load.num_tokens, load.num_slow_tokens))
            self._count_loads(load.num_tokens)
        save_stall = 0.0
        if num_saved := sum(saves):
            copied = self._d2h.transfer(start, cost.copy_s(num_saved))
            stats.tier_store_bytes += num_saved * cost.kv_bytes_per_token
            save_stall = tier.save_stall_s(cost.calibration, saves, copied, forward_end)
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
        unpins = self.scheduler.finish(request, now)
        kept = self.scheduler.retention.holds(request.job_id)
        self.scheduler_trace.append(Finish(
            t=now, request_id=request.request_id, job_id=request.job_id, turn=request.turn, is_last=request.is_last,
            action=FinishAction.PIN if kept else FinishAction.FREE, free_blocks=self.scheduler.pool.num_free,
        ))  # fmt: skip
        self._trace_unpins(unpins, now)

    def _trace_admissions(self, admitted: list[SimRequest], at: float) -> None:
        for request in admitted:
            self.scheduler_trace.append(Admit(
                t=at, request_id=request.request_id, job_id=request.job_id, turn=request.turn,
                prompt_tokens=request.prompt_tokens, cached_tokens=request.cached_tokens,
                free_blocks=self.scheduler.pool.num_free,
            ))  # fmt: skip

    def _trace_unpins(self, unpins: list[Release], now: float) -> None:
        for pin, reason in unpins:
            self.scheduler_trace.append(Unpin(
                t=now, job_id=pin.job_id, reason=reason, num_blocks=len(pin.blocks), held_s=now - pin.pinned_at,
                free_blocks=self.scheduler.pool.num_free,
            ))  # fmt: skip

    def _count_loads(self, num_tokens: int) -> None:
        self.stats.tier_load_bytes += num_tokens * self.cost.kv_bytes_per_token
        self.stats.tier_hit_tokens += num_tokens

    def finish_stats(self) -> SimStats:
        stats = self.stats
        stats.num_preemptions = self.scheduler.num_preemptions
        stats.evicted_blocks = self.scheduler.pool.evicted_blocks
        stats.tier_counters = self.scheduler.connector.tier.sim_counters(
            stats.tier_store_bytes, stats.tier_load_bytes, self.scheduler.connector.queried_tokens, stats.tier_hit_tokens)
        return stats
