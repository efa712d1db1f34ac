"""What a cell's CPU tier did, from whichever record its connector keeps (pure).

Stores: vLLM's ``kv_offload_*`` counters where its own OffloadingConnector exports them; LMCache's
``Stored N out of total M tokens`` lines (vLLM exports no store counter for LMCache's connector, and its offload
counters stay 0 beside it, as the first H200 cell showed); the ``Store event`` debug lines of vLLM 0.26's
SimpleCPUOffloadConnector, which exports no counter at all. Loads: vLLM's external prefix-cache counters, the
tokens vLLM looked up in the tier (a request's prompt beyond its GPU hit) and the tokens the tier had.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.policies import Policy, TierKind
from orchestrator.records.cell import CellOutcome

_LMCACHE_STORED = re.compile(r"LMCache INFO:.*?Stored (\d+) out of total \d+ tokens")
# vLLM 0.26's SimpleCPUOffloadConnector records its stores only in these debug lines, which its policy's logging
# configuration lets through (replica/vllm_logging.json).
_SIMPLE_OFFLOAD_STORED = re.compile(r"Store event \d+ completed: cached (\d+) blocks to CPU")


def lmcache_stores(server_log: str) -> list[int]:
    """The tokens of each store LMCache logged."""
    return [int(tokens) for tokens in _LMCACHE_STORED.findall(server_log)]


def simple_offload_stores(server_log: str) -> list[int]:
    """The blocks of each store the simple offload connector's debug lines record."""
    return [int(count) for count in _SIMPLE_OFFLOAD_STORED.findall(server_log)]


@dataclass(frozen=True)
class TierActivity:
    stored_tokens: float
    stored_from: str  # which record said so
    stores: int | None  # how many stores the record counts, where it counts them
    served_tokens: float  # the tier's hits: tokens loaded instead of computed
    looked_up_tokens: float | None  # None where the engine exports no lookup counter

    @property
    def served_share(self) -> float | None:
        """The share of the tokens vLLM looked up in the tier that it had."""
        return self.served_tokens / self.looked_up_tokens if self.looked_up_tokens else None

    def served_phrase(self) -> str:
        looked_up = f" of {self.looked_up_tokens:,.0f}" if self.looked_up_tokens is not None else ""
        share = f" ({self.served_share:.0%})" if self.served_share is not None else ""
        return f"served {self.served_tokens:,.0f}{looked_up} tokens vLLM looked up there{share}"


def tier_activity(policy: Policy, outcome: CellOutcome, kv_bytes_per_token: float) -> TierActivity | None:
    """What ``outcome``'s CPU tier stored and served (None for a policy without one); ``kv_bytes_per_token`` turns
    the byte counters into tokens."""
    if not policy.has_cpu_tier:
        return None
    counters = outcome.config.tier_counters
    served = counters.external_prefix_cache_hits or 0.0
    looked_up = counters.external_prefix_cache_queries
    logged = lmcache_stores(outcome.server_log)
    if policy.cpu_tier is TierKind.LMCACHE and logged:
        return TierActivity(float(sum(logged)), "LMCache's log", len(logged), served, looked_up)
    if counters.kv_offload_store_bytes is not None:
        return TierActivity(counters.kv_offload_store_bytes / kv_bytes_per_token, "vLLM's kv_offload counters",
                            None, served, looked_up)  # fmt: skip
    blocks = simple_offload_stores(outcome.server_log)
    facts = outcome.config.engine_facts
    block_size = facts.block_size if facts and facts.block_size else 0
    return TierActivity(float(sum(blocks) * block_size), "its debug log", len(blocks), served, looked_up)
