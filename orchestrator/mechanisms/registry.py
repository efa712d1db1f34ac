"""The orderings, retentions and tiers by name: the one place a new one is registered, each kind a ``Registry`` of
its classes (an unknown name answers with the valid ones).

Policies (``orchestrator.policies.catalog``) compose instances of these; the simulator finds a replica's mechanisms here
from what its configuration records.
"""

from __future__ import annotations

from orchestrator.mechanisms.continuum.config import ContinuumConfig
from orchestrator.mechanisms.continuum.retention import ContinuumPins, PinRetention
from orchestrator.mechanisms.lmcache import LMCacheCpuTier
from orchestrator.mechanisms.lmcache_disk import LMCacheDiskTier
from orchestrator.mechanisms.native_offload import NativeOffload, SimpleOffload
from orchestrator.mechanisms.ordering import JobOrder, Ordering
from orchestrator.mechanisms.retention import Retention, SimRetention
from orchestrator.mechanisms.tier import NoTier, Tier
from orchestrator.validation import Registry

ORDERINGS: Registry[type[Ordering]] = Registry("ordering", {kind.name: kind for kind in (Ordering, JobOrder)})
RETENTIONS: Registry[type[Retention]] = Registry("retention", {kind.name: kind for kind in (Retention, ContinuumPins)})
TIERS: Registry[type[Tier]] = Registry("tier", {kind.name: kind for kind in (NoTier, LMCacheCpuTier, NativeOffload,
                                                                          SimpleOffload, LMCacheDiskTier)})


def recorded_ordering(job_priority: bool) -> Ordering:
    """The ordering a simulated replica's configuration records."""
    return JobOrder() if job_priority else Ordering()


def recorded_tier(name: str | None) -> Tier:
    """The tier a simulated replica's configuration records by its ``sim_model`` name (None: it has none)."""
    return NoTier() if name is None else TIERS[name]()


def sim_retention(pins: ContinuumConfig | None) -> SimRetention:
    """The simulator's hooks for the pin rules its configuration records."""
    return SimRetention() if pins is None else PinRetention(pins)
