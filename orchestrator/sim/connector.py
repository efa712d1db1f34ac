"""The CPU tier as the simulated scheduler sees it, as vLLM's scheduler sees its KV connector (pure): how many of a
prompt's tokens beyond its GPU hit the tier can load instead of recompute, whether a load lands beside the forward
passes or before the step's end, and the prompt tokens each step computed that the tier saves."""

from __future__ import annotations

from typing import NamedTuple

from orchestrator.mechanisms.request import SimRequest
from orchestrator.mechanisms.tier import Tier


class Load(NamedTuple):
    """A request's prompt tokens loaded from the CPU tier instead of computed."""

    request: SimRequest
    num_tokens: int
    num_slow_tokens: int  # of them, read from a level behind host memory (a disk tier's), where the store has one


class SimConnector:
    """A policy's tier (``tier``) with its simulated store of ``tier_tokens``; ``queried_tokens`` counts the prompt
    tokens beyond a GPU hit looked up in the tier at admission."""

    def __init__(self, tier: Tier, tier_tokens: int, block_size: int):
        self.tier, self.block_size = tier, block_size
        self.store = tier.sim_store(tier_tokens)
        self.queried_tokens = 0

    @property
    def loads_beside_forward(self) -> bool:
        return self.tier.loads_beside_forward

    def lookup(self, request: SimRequest, gpu_hit_tokens: int) -> Load:
        """Tokens beyond the GPU hit that the CPU tier can load instead of recompute (whole blocks)."""
        found = self.store.lookup(request.job_id, self._segments(request))
        request.saved_tokens = min(found.tokens, request.prompt_tokens)
        usable = min(found.tokens, request.num_tokens - 1) // self.block_size * self.block_size
        return Load(request, max(0, usable - gpu_hit_tokens), max(0, usable - max(found.fast_tokens, gpu_hit_tokens)))

    def save_prompt(self, request: SimRequest, num_new: int, context_before: int) -> int:
        """Save the prompt tokens this step computed that the tier does not have yet, including a GPU hit
        the tier lost (as LMCache stores everything past its own hit); decode tokens are not saved.
        Returns how many tokens were saved."""
        computed = min(context_before + num_new, request.prompt_tokens)
        if not self.store.has_unsaved(request.saved_tokens, computed):
            return 0
        copied = self.store.save_new(request.job_id, self._segments(request), request.saved_tokens, computed)
        if copied:
            request.saved_tokens = computed
        return copied

    def _segments(self, request: SimRequest) -> tuple[tuple[str, int], ...]:
        """A replay's shared segments in the tier's unit, tokens."""
        return tuple((key, num_blocks * self.block_size) for key, num_blocks in request.shared_segments)
