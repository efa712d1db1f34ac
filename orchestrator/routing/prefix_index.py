"""What a prefix-aware router believes a replica has cached: the block hashes it routed there, least recently
used forgotten first once the replica's KV pool would be full (pure).

It is the router's own estimate, as llm-d's approximate prefix router keeps one: the engine may have evicted
sooner (a pin, a burst of other jobs), and the router cannot see that.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence


class PrefixIndex:
    def __init__(self, capacity_blocks: int | None = None):
        if capacity_blocks is not None and capacity_blocks < 1:
            raise ValueError(f"a prefix index holds at least one block, not {capacity_blocks}")
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[Hashable, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def num_matched(self, block_hashes: Sequence[Hashable]) -> int:
        """How many of the prompt's leading blocks the replica is believed to hold (chained hashes: the match
        ends at the first block it does not)."""
        for num_matched, block in enumerate(block_hashes):
            if block not in self._blocks:
                return num_matched
        return len(block_hashes)

    def add(self, block_hashes: Sequence[Hashable]) -> None:
        """The prompt's blocks were sent to the replica: it holds them now, as its most recently used."""
        for block in block_hashes:
            self._blocks[block] = None
            self._blocks.move_to_end(block)
        if self.capacity_blocks is not None:
            while len(self._blocks) > self.capacity_blocks:
                self._blocks.popitem(last=False)
