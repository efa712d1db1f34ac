"""KV policies by name: each maps (engine, DRAM budget) to vLLM arguments, environment and request options.

Ordering and pinning are separate axes so their effects can be told apart: ``job-fcfs`` is ordering only
(vLLM priority scheduling by job arrival), ``continuum-pin-only`` is pinning only, ``continuum`` is both.
Every policy runs under the tracing scheduler (or a subclass), so every cell has the same step trace.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.replica.config import VllmEngineConfig
from orchestrator.replica.schedulers.pins import AdmissionRelease, ContinuumConfig, TtlMode
from orchestrator.validation import InputError

_SCHEDULERS = "orchestrator.replica.schedulers"
TRACING = f"{_SCHEDULERS}.tracing.TracingScheduler"
CONTINUUM = f"{_SCHEDULERS}.continuum.ContinuumScheduler"
# On GPU vLLM schedules asynchronously by default; these keep that behaviour under our subclasses.
ASYNC_TRACING = f"{_SCHEDULERS}.async_variants.AsyncTracingScheduler"
ASYNC_CONTINUUM = f"{_SCHEDULERS}.async_variants.AsyncContinuumScheduler"


NOCACHE_TIER_GB = 1.0  # GiB: the source study's LMCACHE_MAX_LOCAL_CPU_SIZE=1 ablation


class TierKind(str, enum.Enum):
    """A policy's CPU tier, as the simulator models it."""

    LMCACHE = "lmcache"  # loads block the step; every prefill step waits for its save (wait_for_save)
    NATIVE = "native"  # vLLM's OffloadingConnector: stores and loads run beside the forward pass


class PolicyError(InputError):
    """An unknown policy, or one the engine cannot run; the message is one line naming the valid ones."""


@dataclass(frozen=True)
class Policy:
    name: str
    description: str
    pins: ContinuumConfig | None = None  # None: finished turns are freed (stock vLLM)
    job_priority: bool = False  # vLLM priority scheduling with the job's arrival index as priority
    needs_cuda: bool = False
    cpu_tier: TierKind | None = None  # the CPU tier its connector gives the engine
    cpu_tier_gb: float | None = None  # the tier's size where it is not the DRAM budget
    connector: Callable[[float], tuple[tuple[str, ...], dict[str, str]]] | None = field(default=None, repr=False)
    connector_debug_log: bool = False  # its connector records what it did only in debug lines

    @property
    def has_cpu_tier(self) -> bool:
        return self.cpu_tier is not None

    @property
    def tier_is_the_budget(self) -> bool:
        """Its CPU tier is the cell's DRAM budget (so a budget of 0 leaves it without one)."""
        return self.has_cpu_tier and self.cpu_tier_gb is None

    @property
    def uses_lmcache(self) -> bool:
        """LMCache holds the tier: its compiled ops must load, and its tier survives a prefix-cache reset."""
        return self.cpu_tier is TierKind.LMCACHE

    def tier_gib(self, dram_gb: float) -> float:
        """The CPU tier this policy's connector allocates for a DRAM budget of ``dram_gb`` GiB (0 without one)."""
        if not self.has_cpu_tier:
            return 0.0
        return self.cpu_tier_gb if self.cpu_tier_gb is not None else dram_gb

    def connector_gb(self, dram_gb: float, tp: int) -> float:
        """The size its connector is given for a replica's DRAM budget of ``dram_gb`` GiB over ``tp`` ranks. vLLM's
        offload size is the replica's, which vLLM splits over the ranks (its ``kv_offloading_size``); LMCache's
        connector builds an engine with its own CPU tier in every rank's worker, so each is given its share."""
        return dram_gb / tp if self.uses_lmcache else dram_gb

    def engine_config(self, base: VllmEngineConfig, dram_gb: float) -> VllmEngineConfig:
        """``base`` configured for this policy with a CPU tier of ``dram_gb`` where the policy has one."""
        if self.needs_cuda and base.device != "gpu":
            raise PolicyError(
                f"policy {self.name!r} needs a CUDA GPU (its KV connector is CUDA-only in vLLM/LMCache); "
                f"on the CPU engine use one of: {', '.join(cpu_policy_names())}"
            )
        on_gpu = base.device == "gpu"
        if self.pins is not None:
            scheduler = ASYNC_CONTINUUM if on_gpu else CONTINUUM
        else:
            scheduler = ASYNC_TRACING if on_gpu else TRACING
        args, env = self.connector(self.connector_gb(dram_gb, base.tensor_parallel_size)) if self.connector else ((), {})
        env = {**env, **(self.pins.to_env() if self.pins else {})}
        return base.model_copy(
            update={
                "scheduler_cls": scheduler,
                "scheduling_policy": "priority" if self.job_priority else "fcfs",
                "extra_args": base.extra_args + args,
                "extra_env": base.extra_env + tuple(sorted(env.items())),
                "connector_debug_log": self.connector_debug_log,
            }
        )


def _lmcache(cpu_gb_override: float | None = None):
    def connector(dram_gb: float) -> tuple[tuple[str, ...], dict[str, str]]:
        config = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
        env = {
            "LMCACHE_LOCAL_CPU": "True",
            "LMCACHE_MAX_LOCAL_CPU_SIZE": f"{cpu_gb_override if cpu_gb_override is not None else dram_gb:g}",
            "LMCACHE_CHUNK_SIZE": "256",
        }
        return ("--kv-transfer-config", json.dumps(config)), env

    return connector


def _native_offload(simple: bool):
    def connector(dram_gb: float) -> tuple[tuple[str, ...], dict[str, str]]:
        args = ("--kv-offloading-size", f"{dram_gb:g}", "--kv-offloading-backend", "native")
        return args, ({"VLLM_USE_SIMPLE_KV_OFFLOAD": "1"} if simple else {})

    return connector


POLICIES: dict[str, Policy] = {
    policy.name: policy
    for policy in (
        Policy("fcfs", "stock vLLM v1: request-level FCFS, prefix caching, finished turns freed to the LRU cache"),
        Policy("job-fcfs", "program-level FCFS: vLLM priority scheduling by job arrival, no pins", job_priority=True),
        Policy("continuum", "pins a job's KV across tool gaps (TTL 2 s), pinned jobs first, then job FCFS",
               pins=ContinuumConfig(), job_priority=True),
        Policy("continuum-adaptive", "continuum with the TTL estimated from each job's observed tool gaps",
               pins=ContinuumConfig(ttl_mode=TtlMode.ADAPTIVE), job_priority=True),
        Policy("continuum-pin-only", "continuum's pins with stock request-level FCFS order",
               pins=ContinuumConfig(pinned_first=False)),
        Policy("continuum-no-reserve", "continuum without the reserve: new jobs are admitted whenever blocks are free",
               pins=ContinuumConfig(reserve_for_pinned=False), job_priority=True),
        Policy("continuum-prototype", "the public prototype's rules: no reserve, pins give way only when nothing else "
               "runs, an expired pin holds while its job's next turn waits",
               pins=ContinuumConfig(reserve_for_pinned=False, admission_release=AdmissionRelease.IDLE,
                                    hold_while_waiting=True), job_priority=True),
        Policy("continuum-yielding", "continuum whose pins always yield to a blocked admission",
               pins=ContinuumConfig(admission_release=AdmissionRelease.ALWAYS), job_priority=True),
        Policy("lmcache", "LMCache CPU offload (LMCacheConnectorV1) with the DRAM budget as its CPU tier",
               needs_cuda=True, cpu_tier=TierKind.LMCACHE, connector=_lmcache()),
        Policy("lmcache-nocache", "LMCache with a 1 GiB CPU tier (the source study's ablation)",
               needs_cuda=True, cpu_tier=TierKind.LMCACHE, cpu_tier_gb=NOCACHE_TIER_GB,
               connector=_lmcache(NOCACHE_TIER_GB)),
        Policy("native-offload", "vLLM's OffloadingConnector: eager async copy to a CPU tier of the DRAM budget",
               needs_cuda=True, cpu_tier=TierKind.NATIVE, connector=_native_offload(simple=False)),
        Policy("simple-offload", "vLLM's SimpleCPUOffloadConnector with a CPU tier of the DRAM budget",
               needs_cuda=True, cpu_tier=TierKind.NATIVE, connector=_native_offload(simple=True),
               connector_debug_log=True),
    )
}  # fmt: skip


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise PolicyError(f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}") from None


def cpu_policy_names() -> list[str]:
    return [name for name, policy in POLICIES.items() if not policy.needs_cuda]
