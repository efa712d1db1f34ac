"""Prompt text of the agent workload: unique tool outputs sized in tokens of the served model.

Every tool output is drawn from a generator seeded by the md5 of ``"{job_id}:{turn}"`` and starts with a
header that names the job, the turn and the hash, so no two (job, turn) pairs share text and the prefix
cache can only hit what the job itself sent before (a shared tool text once made the source study's prefix
cache hit 99%, and the results were retracted).

Text is sized against a ``TokenCounter`` (the served model's tokenizer), not estimated from words, so the
measured prompt tokens land on the target. The pure functions here never touch a tokenizer library.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from typing import Protocol

# The fill words. Plain lowercase words with no shared prefixes that a byte-pair tokenizer would merge
# across a space, so each costs a stable number of tokens; the tiny model's vocabulary is built from them.
WORD_POOL: tuple[str, ...] = (
    "agent", "alpha", "amber", "anchor", "apple", "arrow", "atlas", "audit", "basin", "beacon",
    "binary", "branch", "bridge", "buffer", "cable", "canyon", "carbon", "cedar", "channel", "cipher",
    "cluster", "cobalt", "comet", "copper", "cursor", "delta", "desert", "engine", "falcon", "fiber",
    "filter", "forest", "garden", "glacier", "granite", "harbor", "helium", "index", "island", "kernel",
    "ladder", "lantern", "ledger", "lemon", "matrix", "meadow", "mirror", "module", "nebula", "needle",
    "object", "ocean", "orbit", "packet", "pepper", "pixel", "planet", "pocket", "quartz", "queue",
    "radar", "record", "river", "rocket", "saddle", "signal", "silver", "socket", "spiral", "summit",
    "switch", "tensor", "thread", "timber", "token", "vector", "velvet", "violet", "window", "zephyr",
)

# Separates one turn's completion from the tool output that follows it in the context.
TOOL_SEPARATOR = "\n"


class TokenCounter(Protocol):
    """Counts tokens the way the served model's tokenizer does."""

    def count(self, text: str) -> int:
        """Tokens of ``text`` as a fragment inside a prompt (no special tokens)."""

    def count_prompt(self, text: str) -> int:
        """Tokens of ``text`` as a whole prompt, with the special tokens the server adds (BOS)."""


def text_digest(key: str) -> str:
    """The md5 hex digest that seeds and labels the text for ``key``."""
    return hashlib.md5(key.encode()).hexdigest()


def tool_output_key(job_id: str, turn: int) -> str:
    return f"{job_id}:{turn}"


def tool_output_header(job_id: str, turn: int) -> str:
    digest = text_digest(tool_output_key(job_id, turn))
    return f"[{job_id}:turn{turn}:{digest[:8]}]"


def words_for(key: str) -> Iterator[str]:
    """An endless, reproducible stream of pool words seeded by the md5 of ``key``."""
    rng = random.Random(int(text_digest(key), 16))
    while True:
        yield rng.choice(WORD_POOL)


class TextSizer:
    """Builds seeded pool-word texts whose token count, as measured by ``measure``, hits a target.

    ``measure(text) -> int`` counts the tokens of a candidate. Words are added at each word's own token
    cost (word-level additivity holds for tokenizers that split at spaces), then the whole text is measured
    and corrected one word at a time, so the result is exact unless a single word overshoots.
    """

    def __init__(self, measure: Callable[[str], int]):
        self._measure = measure
        # Cost in context (after another word), so a constant prefix the measure adds is not counted.
        base = measure(_COST_PROBE)
        self._word_cost = {word: max(1, measure(f"{_COST_PROBE} {word}") - base) for word in WORD_POOL}

    def text(self, head: str, key: str, target_tokens: int) -> str:
        stream = words_for(key)
        words: list[str] = []
        budget = target_tokens - self._measure(head)
        while budget > 0:
            word = next(stream)
            words.append(word)
            budget -= self._word_cost[word]
        return self._correct(head, words, stream, target_tokens)

    def _correct(self, head: str, words: list[str], stream: Iterator[str], target: int) -> str:
        # Boundary merges can make the sum of word costs differ from the whole; each step moves one word.
        text = _join(head, words)
        error = self._measure(text) - target
        for _ in range(_MAX_CORRECTIONS):
            if error == 0:
                break
            candidate = words[:-1] if error > 0 else [*words, next(stream)]
            candidate_error = self._measure(_join(head, candidate)) - target
            if abs(candidate_error) >= abs(error):
                break
            words, error = candidate, candidate_error
        return _join(head, words)


_MAX_CORRECTIONS = 64
_COST_PROBE = "[probe]"


def _join(head: str, words: list[str]) -> str:
    return head + "".join(" " + word for word in words)
