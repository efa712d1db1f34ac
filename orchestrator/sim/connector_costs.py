"""What vLLM 0.26's KV connectors cost a step, as their GPU cells measured it, and a simulated engine that charges it
(pure).

LMCache (0.5.3, ``LMCacheConnectorV1``, neither layer-wise nor asynchronous loading) does its work inside the step,
and the step waits for all of it (``LMCacheStepWork``):

- it retrieves a request's prefix from its CPU tier before the forward pass (not beside it) and stores the request's
  new full 256-token chunks after it (``wait_for_save``); each costs what LMCache's own log times it at, per
  retrieve or store and per chunk;
- a step that computes prompt tokens pays a fixed cost besides: its traces show that such a step ends the
  asynchronous scheduling pipeline (they fit a roofline read with one step in flight, 0.95-0.97 correlation, against
  0.19-0.67 read with two), so the host's work of a step is no longer hidden behind the GPU's.

vLLM's native offload loads asynchronously beside the steps, as the simulator models it, but each load is a job on the
connector's transfer queue that takes a fixed time besides its bytes at the host link's rate (``NativeLoadJobs``), so
loads wait behind each other. Its cells tell the queue from a fixed wait after each load (the connector noticing a
finished load a few steps late): the wait that fits the cells at 1.8 JPS leaves the one at 3 JPS 11% fast, and the
wait fitted on all of them puts those at 1.8 JPS 4% slow; the queue fits both within 4%. Where the fixed time goes is
not measured: a 16-token block of Llama-3.1-8B is 64 tensors of 32 KiB, one per layer and K or V, and copies launched
per block would weigh more than their bytes.

``StackSimulation`` is the simulator's cell loop with engines that charge these costs: ``StackEngineCore`` extends the
step's end by LMCache's work before the tier's copies are laid beside it, and gives its scheduler the native tier with
its load jobs. It stands in for hooks of the tier mechanisms (``Tier.save_stall_s`` is LMCache's today, and the
calibration's ``lmcache_save_*`` must be zero beside it, or the save is charged twice; ``Tier.load_s`` is native
offload's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from orchestrator.mechanisms.lmcache import CHUNK_TOKENS, LMCacheCpuTier
from orchestrator.mechanisms.native_offload import NativeOffload
from orchestrator.sim.engine import EngineCore, SimEngine
from orchestrator.sim.hardware import StepCost
from orchestrator.sim.loop import SimResult, Simulation
from orchestrator.sim.scheduler import StepPlan
from orchestrator.workload.schedule import Schedule
from orchestrator.workload.spec import WorkloadSpec


@dataclass(frozen=True)
class LMCacheStepWork:
    """What a step with LMCache's connector waits for, in seconds."""

    prompt_step_s: float = 0.0  # a step that computes prompt tokens: the host's step work, no longer hidden
    store_s: float = 0.0  # per store (a request's new full chunks after a step)
    store_chunk_s: float = 0.0  # per chunk stored
    retrieve_s: float = 0.0  # per retrieve (a request's prefix before its first step)
    retrieve_chunk_s: float = 0.0  # per chunk retrieved

    def stall_s(self, computes_prompt: bool, saves: Sequence[int], loads: Sequence[int]) -> float:
        """The step's wait: ``saves`` and ``loads`` are the tokens each request stored and retrieved in it."""
        stores = sum(self.store_s + self.store_chunk_s * math.ceil(tokens / CHUNK_TOKENS) for tokens in saves if tokens)
        retrieves = sum(self.retrieve_s + self.retrieve_chunk_s * math.ceil(tokens / CHUNK_TOKENS)
                        for tokens in loads if tokens)  # fmt: skip
        return (self.prompt_step_s if computes_prompt else 0.0) + stores + retrieves


@dataclass(frozen=True)
class NativeLoadJobs(NativeOffload):
    """vLLM's native offload whose every load takes ``load_job_s`` on the transfer queue besides its bytes."""

    load_job_s: float = 0.0

    def load_s(self, cost: StepCost, num_tokens: int, num_slow_tokens: int) -> float:
        return self.load_job_s + super().load_s(cost, num_tokens, num_slow_tokens)


@dataclass(frozen=True)
class ConnectorCosts:
    """The connectors' costs of one engine stack."""

    lmcache: LMCacheStepWork = field(default_factory=LMCacheStepWork)
    native_load_job_s: float = 0.0  # native offload: each load's fixed time on the transfer queue


class StackEngineCore(EngineCore):
    """An engine whose steps charge ``costs``: LMCache's work lengthens the step before its copies are laid beside it
    (they are part of that work), and a native tier's loads are ``NativeLoadJobs``."""

    def __init__(self, engine: SimEngine, costs: ConnectorCosts):
        super().__init__(engine)
        self.costs = costs
        tier = self.scheduler.tier_mechanism
        if isinstance(tier, NativeOffload):
            self.scheduler.tier_mechanism = NativeLoadJobs(tier.fixed_gib, load_job_s=costs.native_load_job_s)

    def _wait_for_copies(self, plan: StepPlan, start: float, forward_end: float, saves: list[int]) -> float:
        tier = self.scheduler.tier_mechanism
        if isinstance(tier, LMCacheCpuTier):
            computes_prompt = any(before < request.prompt_tokens for request, _, before in plan.scheduled)
            work = self.costs.lmcache.stall_s(computes_prompt, saves, [load.num_tokens for load in plan.loads])
            self.stats.save_stall_s += work
            forward_end += work
        return super()._wait_for_copies(plan, start, forward_end, saves)


class StackSimulation(Simulation):
    """``sim.loop.Simulation`` on engines that charge ``costs`` (one replica)."""

    def __init__(self, workload: WorkloadSpec, engine: SimEngine, costs: ConnectorCosts,
                 schedule: Schedule | None = None):  # fmt: skip
        super().__init__(workload, engine, schedule)
        self.engines = [StackEngineCore(engine, costs)]


def simulate_stack(workload: WorkloadSpec, engine: SimEngine, costs: ConnectorCosts,
                   schedule: Schedule | None = None) -> SimResult:  # fmt: skip
    return StackSimulation(workload, engine, costs, schedule).run()
