"""The retentions and tiers by name: the one place a new one is registered (the two orderings are
``ordering.ARRIVAL`` and ``ordering.JOB``).

Policies (``orchestrator.policies``) compose instances of these; the simulator finds a replica's mechanisms here
from what its configuration records.
"""

from __future__ import annotations

from orchestrator.mechanisms.lmcache import LMCacheCpuTier
from orchestrator.mechanisms.lmcache_disk import LMCacheDiskTier
from orchestrator.mechanisms.native_offload import NativeOffload, SimpleOffload
from orchestrator.mechanisms.ordering import ARRIVAL, JOB, Ordering
from orchestrator.mechanisms.retention import ContinuumPins, Retention
from orchestrator.mechanisms.tier import NoTier, Tier

RETENTIONS: dict[str, type[Retention]] = {retention.name: retention for retention in (Retention, ContinuumPins)}
TIERS: dict[str, type[Tier]] = {
    tier.name: tier for tier in (NoTier, LMCacheCpuTier, NativeOffload, SimpleOffload, LMCacheDiskTier)
}


def recorded_ordering(job_priority: bool) -> Ordering:
    """The ordering a simulated replica's configuration records."""
    return JOB if job_priority else ARRIVAL


def recorded_tier(name: str | None) -> Tier:
    """The tier a simulated replica's configuration records by its ``sim_model`` name (None: it has none)."""
    return NoTier() if name is None else TIERS[name]()
