"""LMCache's local disk tier behind its CPU tier (``LMCACHE_LOCAL_DISK``).

LMCache stores every chunk in host memory and, from its own threads, in a file on a local disk: the disk is
``DISK_PER_DRAM`` times the cell's DRAM budget, so a prefix host memory has evicted can still be found there. A
lookup finds a prefix in host memory first, then on disk; what only the disk holds is read from it before the copy
to the GPU, so a disk hit is slower than a memory hit and faster than recomputing. Writes to disk never stall a step,
so a step's saves cost what the CPU tier's cost (``wait_for_save``). Everything else is LMCache's CPU tier: its
connector, its per-rank share of the budget, its evidence (the same ``Stored`` log lines) and its node's needs, plus
``DISK_PER_DRAM`` times the budget free under ``DISK_FOLDER`` on the node, which the worker checks before the replica
starts (``disk_need``).

In the simulator the store is two least-recently-used levels, host memory and disk, both written on every save;
the tokens of a load beyond what host memory holds are read at ``DISK_READ_BYTES_S`` first. That rate is a PCIe 4.0
datacentre NVMe drive's sequential read (Samsung PM9A3: 6,800 MB/s on its data sheet), an upper bound for LMCache's
file reads; nothing of this tier has run on a GPU yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.mechanisms.lmcache import LMCacheCpuTier
from orchestrator.mechanisms.tier import Connector, DiskNeed
from orchestrator.mechanisms.tier_store import CpuTier, TierHit, TierStore

if TYPE_CHECKING:
    from orchestrator.roofline.hardware import StepCost

DISK_PER_DRAM = 4  # the disk tier's size, in multiples of the CPU tier's
DISK_READ_BYTES_S = 6.8e9
DISK_FOLDER = "/tmp/kvsweep-lmcache-disk"
DISK_PATH = f"file://{DISK_FOLDER}/"  # as LMCACHE_LOCAL_DISK takes it


class DiskBackedStore(TierStore):
    """Host memory with a disk behind it: every save goes to both, a lookup takes the longer prefix."""

    def __init__(self, capacity_tokens: int):
        self.memory = CpuTier(capacity_tokens)
        self.disk = CpuTier(DISK_PER_DRAM * capacity_tokens)

    def lookup(self, job: str, segments: Sequence[tuple[str, int]]) -> TierHit:
        in_memory = self.memory.hit_chain(job, segments)
        return TierHit(max(in_memory, self.disk.hit_chain(job, segments)), in_memory)

    def save_new(self, job: str, segments: Sequence[tuple[str, int]], num_saved: int, num_tokens: int) -> int:
        copied = self.memory.save_new(job, segments, num_saved, num_tokens)
        self.disk.save_new(job, segments, num_saved, num_tokens)
        return copied

    def has_unsaved(self, num_saved: int, num_tokens: int) -> bool:
        return self.memory.has_unsaved(num_saved, num_tokens)


@dataclass(frozen=True)
class LMCacheDiskTier(LMCacheCpuTier):
    name = "lmcache-disk"

    def disk_need(self, dram_gb: float) -> DiskNeed:
        return DiskNeed(DISK_FOLDER, DISK_PER_DRAM * self.size_gib(dram_gb))

    def connector(self, connector_gib: float) -> Connector:
        args, env = super().connector(connector_gib)
        disk = {"LMCACHE_LOCAL_DISK": DISK_PATH, "LMCACHE_MAX_LOCAL_DISK_SIZE": f"{DISK_PER_DRAM * connector_gib:g}"}
        return args, env | disk

    def sim_store(self, capacity_tokens: int) -> DiskBackedStore:
        return DiskBackedStore(capacity_tokens)

    def load_s(self, cost: StepCost, num_tokens: int, num_slow_tokens: int) -> float:
        from_disk_s = num_slow_tokens * cost.kv_bytes_per_token / DISK_READ_BYTES_S
        return from_disk_s + super().load_s(cost, num_tokens, num_slow_tokens)
