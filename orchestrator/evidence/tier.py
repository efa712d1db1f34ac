"""What a cell's CPU tier did (pure): what it stored, from whichever record its connector keeps (its tier
mechanism knows which: ``mechanisms.tier.Tier.stores``), and what it served, from vLLM's external prefix-cache
counters: the tokens vLLM looked up in the tier (a request's prompt beyond its GPU hit) and the tokens it had.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.policies.catalog import Policy
from orchestrator.records.cell import CellOutcome


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
    stored = policy.tier.stores(outcome, kv_bytes_per_token)
    if stored is None:
        return None
    counters = outcome.config.tier_counters
    return TierActivity(stored.tokens, stored.record, stored.count, counters.external_prefix_cache_hits or 0.0,
                        counters.external_prefix_cache_queries)  # fmt: skip
