"""Token counting with the served model's own tokenizer (the I/O edge of workload planning)."""

from __future__ import annotations

from functools import lru_cache


class HfTokenCounter:
    """A ``TokenCounter`` backed by a Hugging Face tokenizer loaded from a local directory or cache."""

    def __init__(self, name_or_path: str):
        from transformers import AutoTokenizer

        # The Rust tokenizer underneath: the same ids as the wrapper, without its per-call overhead.
        self._tokenizer = AutoTokenizer.from_pretrained(name_or_path).backend_tokenizer

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_prompt(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=True).ids)


@lru_cache(maxsize=4)
def token_counter_for(name_or_path: str) -> HfTokenCounter:
    return HfTokenCounter(name_or_path)
