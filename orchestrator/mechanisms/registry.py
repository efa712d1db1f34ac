"""The orderings, retentions and tiers by name: the one place a new one is registered, each kind a ``Registry`` of
its classes (an unknown name answers with the valid ones).

Policies (``orchestrator.policies.catalog``) compose instances of these, and the simulator is handed a policy's own
(``sim.scheduler.SimMechanisms``).
"""

from __future__ import annotations

from orchestrator.inputs.validation import Registry
from orchestrator.mechanisms.continuum.retention import ContinuumPins
from orchestrator.mechanisms.lmcache import LMCacheCpuTier
from orchestrator.mechanisms.lmcache_disk import LMCacheDiskTier
from orchestrator.mechanisms.native_offload import NativeOffload, SimpleOffload
from orchestrator.mechanisms.ordering import JobOrder, Ordering
from orchestrator.mechanisms.retention import Retention
from orchestrator.mechanisms.tier import NoTier, Tier

ORDERINGS: Registry[type[Ordering]] = Registry("ordering", {kind.name: kind for kind in (Ordering, JobOrder)})
RETENTIONS: Registry[type[Retention]] = Registry("retention", {kind.name: kind for kind in (Retention, ContinuumPins)})
TIERS: Registry[type[Tier]] = Registry("tier", {kind.name: kind for kind in (NoTier, LMCacheCpuTier, NativeOffload,
                                                                          SimpleOffload, LMCacheDiskTier)})

