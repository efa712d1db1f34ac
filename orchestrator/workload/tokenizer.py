"""Token counting with the served model's own tokenizer (the I/O edge of workload planning)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

# The class a model directory's tokenizer_config.json names when its tokenizer is tokenizer.json alone (the
# project's generated models, Llama 3's); AutoTokenizer then builds exactly this class.
GENERIC_FAST_TOKENIZER = "PreTrainedTokenizerFast"


def load_tokenizer(name_or_path: str):
    """The model's Hugging Face tokenizer, as ``AutoTokenizer`` loads it. A local model whose tokenizer is the
    generic fast class gets that class directly: the same tokenizer without AutoTokenizer's imports of every
    model's tokenizer and of torch (about 4 s in each new worker process, against 1 s)."""
    config = Path(name_or_path) / "tokenizer_config.json"
    if config.is_file() and json.loads(config.read_text()).get("tokenizer_class") == GENERIC_FAST_TOKENIZER:
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(name_or_path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_path)


class HfTokenCounter:
    """A ``TokenCounter`` backed by a Hugging Face tokenizer loaded from a local directory or cache."""

    def __init__(self, name_or_path: str):
        # The Rust tokenizer underneath: the same ids as the wrapper, without its per-call overhead.
        self._tokenizer = load_tokenizer(name_or_path).backend_tokenizer

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_prompt(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=True).ids)


@lru_cache(maxsize=4)
def token_counter_for(name_or_path: str) -> HfTokenCounter:
    return HfTokenCounter(name_or_path)
