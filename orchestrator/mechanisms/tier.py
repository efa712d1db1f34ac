"""A KV tier beyond the GPU pool: what every tier mechanism answers, and the defaults they share.

A tier is a vLLM KV connector and the host memory behind it (``NoTier``: a policy's tier when it has none). Its
module says how vLLM is asked for it (arguments and environment), how large it is for a cell's DRAM budget, how the
simulator runs it (the store that keeps what it saved, how long a load and a save take), what record on a real
engine proves it worked, and what a node needs to run it. The defaults here are vLLM's native offload's: loads from
host memory over the PCIe link, stores that never stall a step, and vLLM's ``kv_offload_*`` counters as the record.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from orchestrator.mechanisms.tier_store import CpuTier, EmptyStore, TierStore
from orchestrator.records.cell import CellOutcome, TierCounters
from orchestrator.units import GIB

if TYPE_CHECKING:
    from orchestrator.roofline.hardware import Calibration, StepCost


class NodeNeed(str, enum.Enum):
    """What a node must offer a mechanism beyond vLLM itself."""

    CUDA = "cuda"  # its connector is CUDA-only in vLLM and LMCache
    LMCACHE = "lmcache"  # LMCache's compiled ops must load (the doctor and the worker check them)


class Evidence(NamedTuple):
    """Whether a finished cell shows the mechanism did its job, and what it shows."""

    ok: bool
    detail: str


class Stores(NamedTuple):
    """What a tier stored in a cell, from the one record its connector keeps."""

    tokens: float
    record: str  # which record said so
    count: int | None  # how many stores the record counts, where it counts them


Connector = tuple[tuple[str, ...], dict[str, str]]  # vLLM's arguments and the server's environment


class DiskNeed(NamedTuple):
    """Local disk a tier fills on its replica's node: ``gib`` free under the folder ``path``."""

    path: str
    gib: float


@dataclass(frozen=True)
class Tier(ABC):
    """One tier mechanism. Registered by ``name`` in ``mechanisms.registry``; a policy holds one instance."""

    fixed_gib: float | None = None  # its host memory where it is not the cell's DRAM budget

    name: ClassVar[str]
    needs: ClassVar[frozenset[NodeNeed]] = frozenset({NodeNeed.CUDA})
    keeps_kv_across_reset: ClassVar[bool] = False  # vLLM's prefix-cache reset leaves this tier's KV in place
    connector_debug_log: ClassVar[bool] = False  # its connector records what it did only in debug lines
    # The simulator: a load lands beside the forward passes and its request waits for it (vLLM's connector says the
    # load is asynchronous); otherwise the step that scheduled it waits.
    loads_beside_forward: ClassVar[bool] = False

    # -- sizes ----------------------------------------------------------------------------------------------------

    @property
    def is_the_budget(self) -> bool:
        """Its host memory is the cell's DRAM budget (so a budget of 0 leaves it none)."""
        return self.fixed_gib is None

    def size_gib(self, dram_gb: float) -> float:
        """The host memory it takes for a replica's DRAM budget of ``dram_gb`` GiB."""
        return self.fixed_gib if self.fixed_gib is not None else dram_gb

    def dram_gb_taken(self, dram_gb: float) -> float:
        """The DRAM budget a cell with this tier is given out of ``dram_gb``: all of it (its size may be fixed, but
        its cells are still told apart by the budget they ran under)."""
        return dram_gb

    def connector_gib(self, dram_gb: float, tp: int) -> float:
        """The size its connector is given for a replica of ``tp`` ranks: the replica's, which vLLM splits."""
        return self.size_gib(dram_gb)

    def disk_need(self, dram_gb: float) -> DiskNeed | None:
        """The local disk it fills for a replica's DRAM budget of ``dram_gb`` GiB (None: none; host memory is the
        cluster's to reserve, ``CellSpec.replica_host_gib``). The worker checks it before a replica starts."""
        return None

    # -- serving --------------------------------------------------------------------------------------------------

    @abstractmethod
    def connector(self, connector_gib: float) -> Connector:
        """vLLM's arguments and the server's environment for a connector of ``connector_gib`` GiB."""

    # -- the simulator --------------------------------------------------------------------------------------------

    @property
    def sim_model(self) -> str | None:
        """The name a simulated replica's configuration records for this tier."""
        return self.name

    def sim_store(self, capacity_tokens: int) -> TierStore:
        """What keeps the tier's saved prefixes in a simulated replica."""
        return CpuTier(capacity_tokens)

    def load_s(self, cost: StepCost, num_tokens: int, num_slow_tokens: int) -> float:
        """How long a load of ``num_tokens`` takes on the host link (``num_slow_tokens`` of them from a slower
        level behind host memory, where the store has one)."""
        return cost.copy_s(num_tokens)

    def sim_counters(self, store_bytes: float, load_bytes: float, queried_tokens: int, hit_tokens: int) -> TierCounters:
        """What vLLM reports of the tier, from a simulated replica's totals: the bytes its connector stored and
        loaded, the tokens looked up in it at each admission, and the tokens it had."""
        return TierCounters(kv_offload_store_bytes=store_bytes, kv_offload_load_bytes=load_bytes,
                            external_prefix_cache_queries=float(queried_tokens),
                            external_prefix_cache_hits=float(hit_tokens))  # fmt: skip

    def save_stall_s(self, calibration: Calibration, saves: Sequence[int], copied_at: float,
                     forward_end: float) -> float:  # fmt: skip
        """How long a step that saved ``saves`` tokens (one entry per request) waits after its forward pass."""
        return 0.0

    def step_work_s(self, calibration: Calibration, computes_prompt: bool, saves: Sequence[int],
                    loads: Sequence[int]) -> float:  # fmt: skip
        """The connector's own work inside a step, which the step waits for before its copies are laid beside it:
        ``computes_prompt`` whether the step computes prompt tokens, ``saves`` and ``loads`` the tokens each request
        stored to and retrieved from the tier in it. None by default (the connector's copies are the step's only
        wait)."""
        return 0.0

    # -- evidence on a real engine --------------------------------------------------------------------------------

    def stores(self, outcome: CellOutcome, kv_bytes_per_token: float) -> Stores | None:
        """What it stored: vLLM's offload counters, else the record its connector keeps instead (None: no tier)."""
        counters = outcome.config.tier_counters
        if counters.kv_offload_store_bytes is not None:
            return Stores(counters.kv_offload_store_bytes / kv_bytes_per_token, "vLLM's kv_offload counters", None)
        return self.logged_stores(outcome)

    def logged_stores(self, outcome: CellOutcome) -> Stores:
        """Its stores where vLLM exports no counter for them."""
        return Stores(0.0, "no record", None)

    def evidence(self, outcome: CellOutcome) -> Evidence | None:
        """It stored to host memory, and what it served back (None: nothing of its own to show)."""
        counters = outcome.config.tier_counters
        if counters.kv_offload_store_bytes is None:
            stores = self.logged_stores(outcome)
            return Evidence(stores.tokens > 0, f"CPU tier stored {stores.tokens:,.0f} tokens ({stores.record}); "
                            f"it {served(counters)}")  # fmt: skip
        stored, loaded = counters.kv_offload_store_bytes or 0.0, counters.kv_offload_load_bytes or 0.0
        return Evidence(stored > 0, f"CPU tier stored {stored / GIB:.2f} GiB, loaded {loaded / GIB:.2f} GiB; "
                        f"it {served(counters)}")  # fmt: skip


@dataclass(frozen=True)
class NoTier(Tier):
    """No tier: vLLM's GPU prefix cache alone. No connector, no host memory, nothing saved or loaded, no record."""

    fixed_gib: float | None = 0.0

    name = "none"
    needs = frozenset()

    def dram_gb_taken(self, dram_gb: float) -> float:
        """None of it: its cells do not differ by a budget that means nothing to them."""
        return 0.0

    def connector(self, connector_gib: float) -> Connector:
        return (), {}

    @property
    def sim_model(self) -> None:
        """Nothing (the simulator's configuration has recorded no tier as none since before tiers were mechanisms)."""
        return None

    def sim_store(self, capacity_tokens: int) -> EmptyStore:
        return EmptyStore()

    def sim_counters(self, store_bytes: float, load_bytes: float, queried_tokens: int, hit_tokens: int) -> TierCounters:
        """Nothing: vLLM exports no connector counters without a connector (every counter unset)."""
        return TierCounters()

    def stores(self, outcome: CellOutcome, kv_bytes_per_token: float) -> None:
        return None

    def evidence(self, outcome: CellOutcome) -> None:
        return None


def served(counters: TierCounters) -> str:
    """What a connector's tier gave back, from vLLM's external prefix-cache counters (tokens looked up there)."""
    hits, queries = counters.external_prefix_cache_hits or 0.0, counters.external_prefix_cache_queries or 0.0
    return f"served {hits:,.0f} of {queries:,.0f} tokens vLLM looked up there"
