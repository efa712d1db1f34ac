"""KV policies by name, each a composition of mechanisms (``orchestrator.mechanisms``): an ordering, a retention
and a tier. The policy answers for its mechanisms together (its vLLM configuration, its sizes, its evidence, its
node's needs); what each means lives in its mechanism's module.

Ordering and pinning are separate axes so their effects can be told apart: ``job-fcfs`` is ordering only
(vLLM priority scheduling by job arrival), ``continuum-pin-only`` is pinning only, ``continuum`` is both.
Every policy runs under the tracing scheduler (or a subclass), so every cell has the same scheduler trace.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.gpus import CPU
from orchestrator.inputs.validation import InputError, Registry
from orchestrator.mechanisms.continuum.config import AdmissionRelease, ContinuumConfig, TtlMode
from orchestrator.mechanisms.ordering import Ordering
from orchestrator.mechanisms.registry import ORDERINGS, RETENTIONS, TIERS
from orchestrator.mechanisms.retention import Retention
from orchestrator.mechanisms.tier import Evidence, NodeNeed, NoTier, Tier
from orchestrator.records.cell import CellOutcome
from orchestrator.replica.config import VllmEngineConfig

NOCACHE_TIER_GB = 1.0  # GiB: the source study's LMCACHE_MAX_LOCAL_CPU_SIZE=1 ablation


class PolicyError(InputError):
    """An unknown policy, or one the engine cannot run; the message is one line naming the valid ones."""


@dataclass(frozen=True)
class Policy:
    name: str
    description: str
    ordering: Ordering = Ordering()
    retention: Retention = Retention()
    tier: Tier = NoTier()

    @property
    def mechanisms(self) -> frozenset[type]:
        """The kinds of mechanism it is made of (its ordering's, retention's and tier's classes)."""
        return frozenset({type(self.ordering), type(self.retention), type(self.tier)})

    @property
    def needs(self) -> frozenset[NodeNeed]:
        """What a node must offer its mechanisms beyond vLLM."""
        return self.tier.needs

    def runs_on(self, device: str) -> bool:
        """Whether its mechanisms run on ``device`` (cpu or gpu): a CUDA-only connector runs on a GPU alone."""
        return device != CPU or NodeNeed.CUDA not in self.needs

    def dram_gb_taken(self, dram_gb: float) -> float:
        """The DRAM budget a cell of this policy is given out of ``dram_gb`` (its tier's answer)."""
        return self.tier.dram_gb_taken(dram_gb)

    @property
    def tier_is_the_budget(self) -> bool:
        """Its CPU tier is the cell's DRAM budget (so a budget of 0 leaves it without one)."""
        return self.tier.is_the_budget

    @property
    def keeps_kv_across_reset(self) -> bool:
        """vLLM's prefix-cache reset leaves KV in its tier (a replica reused for it is not proven clean)."""
        return self.tier.keeps_kv_across_reset

    def tier_gib(self, dram_gb: float) -> float:
        """The CPU tier this policy's connector allocates for a DRAM budget of ``dram_gb`` GiB (0 without one)."""
        return self.tier.size_gib(dram_gb)

    def evidence(self, outcome: CellOutcome) -> Evidence | None:
        """What a finished cell shows its mechanisms did (None: nothing of their own)."""
        found = self.retention.evidence(outcome)
        return found if found is not None else self.tier.evidence(outcome)

    def engine_config(self, base: VllmEngineConfig, dram_gb: float) -> VllmEngineConfig:
        """``base`` configured for this policy with a CPU tier of ``dram_gb`` where the policy has one."""
        if not self.runs_on(base.device):
            raise PolicyError(
                f"policy {self.name!r} needs a CUDA GPU (its KV connector is CUDA-only in vLLM/LMCache); "
                f"on the CPU engine use one of: {', '.join(cpu_policy_names())}"
            )
        tier = self.tier
        args, env = tier.connector(tier.connector_gib(dram_gb, base.tensor_parallel_size))
        env = {**env, **self.retention.env()}
        return base.model_copy(
            update={
                "scheduler_cls": self.retention.scheduler_cls(on_gpu=base.device == "gpu"),
                "scheduling_policy": self.ordering.vllm_scheduling_policy,
                "extra_args": base.extra_args + args,
                "extra_env": base.extra_env + tuple(sorted(env.items())),
                "connector_debug_log": tier.connector_debug_log,
            }
        )


_PINS, JOB = RETENTIONS["continuum-pins"], ORDERINGS["job"]()

POLICIES: Registry[Policy] = Registry("policy", {
    policy.name: policy
    for policy in (
        Policy("fcfs", "stock vLLM v1: request-level FCFS, prefix caching, finished turns freed to the LRU cache"),
        Policy("job-fcfs", "program-level FCFS: vLLM priority scheduling by job arrival, no pins", ordering=JOB),
        Policy("continuum", "pins a job's KV across tool gaps (TTL 2 s), pinned jobs first, then job FCFS",
               ordering=JOB, retention=_PINS(ContinuumConfig())),
        Policy("continuum-adaptive", "continuum with the TTL estimated from each job's observed tool gaps",
               ordering=JOB, retention=_PINS(ContinuumConfig(ttl_mode=TtlMode.ADAPTIVE))),
        Policy("continuum-pin-only", "continuum's pins with stock request-level FCFS order",
               retention=_PINS(ContinuumConfig(pinned_first=False))),
        Policy("continuum-no-reserve", "continuum without the reserve: new jobs are admitted whenever blocks are free",
               ordering=JOB, retention=_PINS(ContinuumConfig(reserve_for_pinned=False))),
        Policy("continuum-prototype", "the public prototype's rules: no reserve, pins give way only when nothing else "
               "runs, an expired pin holds while its job's next turn waits",
               ordering=JOB, retention=_PINS(ContinuumConfig(reserve_for_pinned=False,
                                                             admission_release=AdmissionRelease.IDLE,
                                                             hold_while_waiting=True))),
        Policy("continuum-yielding", "continuum whose pins always yield to a blocked admission",
               ordering=JOB, retention=_PINS(ContinuumConfig(admission_release=AdmissionRelease.ALWAYS))),
        Policy("lmcache", "LMCache CPU offload (LMCacheConnectorV1) with the DRAM budget as its CPU tier",
               tier=TIERS["lmcache"]()),
        Policy("lmcache-nocache", "LMCache with a 1 GiB CPU tier (the source study's ablation)",
               tier=TIERS["lmcache"](fixed_gib=NOCACHE_TIER_GB)),
        Policy("native-offload", "vLLM's OffloadingConnector: eager async copy to a CPU tier of the DRAM budget",
               tier=TIERS["native"]()),
        Policy("simple-offload", "vLLM's SimpleCPUOffloadConnector with a CPU tier of the DRAM budget",
               tier=TIERS["simple"]()),
        Policy("lmcache-disk", "LMCache with the DRAM budget as its CPU tier and a local disk of four times it behind",
               tier=TIERS["lmcache-disk"]()),
    )
}, error=PolicyError)  # fmt: skip


def get_policy(name: str) -> Policy:
    return POLICIES[name]


def cpu_policy_names() -> list[str]:
    return [name for name, policy in POLICIES.items() if policy.runs_on(CPU)]


def policies_covering_every_mechanism(device: str, baseline: str = "fcfs") -> tuple[str, ...]:
    """Policies that between them run every mechanism that runs on ``device`` (cpu or gpu): ``baseline`` first (what
    every comparison and the evidence run's profile need), then, greedily, the policy that runs the most mechanisms
    not yet run, the first in the table on a tie. What a check of a node runs one short cell of each, a newly
    registered mechanism included."""
    candidates = [policy for policy in POLICIES.values() if policy.runs_on(device)]
    chosen = [baseline]
    not_run = frozenset().union(*(policy.mechanisms for policy in candidates)) - POLICIES[baseline].mechanisms
    while not_run:
        policy = max(candidates, key=lambda candidate: len(candidate.mechanisms & not_run))
        chosen.append(policy.name)
        not_run -= policy.mechanisms
    return tuple(chosen)
