"""What a prefix-aware router believes a replica has cached: the block hashes it routed there, least recently
used forgotten first once the replica's KV pool would be full (pure).

It is the router's own estimate, as llm-d's approximate prefix router keeps one: the engine may have evicted
sooner (a pin, a burst of other jobs), and the router cannot see that.
"""

from __future__ import annotations

import hashlib
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


# A router in front of real replicas sees prompts as text, without the model's tokenizer: it hashes whole chunks of
# characters, each hash chained to the one before as vLLM chains its block hashes, so equal hashes mean equal
# prefixes. About four characters make a token in English text, so a chunk of 64 characters stands for a 16-token
# block; ``CHARS_PER_TOKEN`` turns a replica's KV pool into the chunks a prefix index may believe it holds.
CHUNK_CHARS = 64
CHARS_PER_TOKEN = 4


def text_block_hashes(text: str, chunk_chars: int = CHUNK_CHARS) -> tuple[int, ...]:
    """Chained hashes of the text's whole ``chunk_chars``-character chunks, first chunk first (a partial last chunk
    is left out, as vLLM leaves a partial block out of its prefix cache)."""
    hashes, previous = [], b""
    for start in range(0, len(text) - chunk_chars + 1, chunk_chars):
        previous = hashlib.blake2b(previous + text[start:start + chunk_chars].encode(), digest_size=8).digest()
        hashes.append(int.from_bytes(previous, "big"))
    return tuple(hashes)


def chunks_held(num_kv_blocks: int, block_size: int, chunk_chars: int = CHUNK_CHARS) -> int:
    """How many text chunks a KV pool of ``num_kv_blocks`` blocks of ``block_size`` tokens holds, about."""
    return max(1, num_kv_blocks * block_size * CHARS_PER_TOKEN // chunk_chars)
