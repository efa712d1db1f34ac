"""The project's own tokenizer: every pool word with its leading space is one token, every other character
one token, so prompt sizes are exact and text round-trips.

The generated tiny model and every dummy-weight model use it; it needs no download. What a model generates
round-trips when it is made of pool words: decoded and sent back in the next turn, it tokenizes to the same
ids, which the prefix cache needs. Dummy-weight replicas therefore restrict answers to those words
(``answer_token_ids``, sent as vLLM's ``allowed_token_ids``); random weights would otherwise emit special
tokens that detokenization drops, or characters that re-encode differently.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from orchestrator.workload.text import WORD_POOL

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
PAD, BOS, EOS, UNK = SPECIAL_TOKENS
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def vocabulary() -> list[str]:
    """Token strings by id: specials, then each pool word with its leading space, then single characters."""
    characters = [chr(code) for code in range(32, 127)] + ["\n", "\t"]
    return [*SPECIAL_TOKENS, *(" " + word for word in WORD_POOL), *characters]


def token_id(token: str) -> int:
    return vocabulary().index(token)


def answer_token_ids() -> tuple[int, ...]:
    """The pool words' ids: answers made of them decode and re-encode to the same ids."""
    first = len(SPECIAL_TOKENS)
    return tuple(range(first, first + len(WORD_POOL)))


def special_token_ids() -> dict[str, int]:
    """The ids a model config names (``bos_token_id`` ...), as this tokenizer has them."""
    return {"bos_token_id": token_id(BOS), "eos_token_id": token_id(EOS), "pad_token_id": token_id(PAD)}


def write_tokenizer(directory: Path, model_max_length: int) -> None:
    """The tokenizer's files, as ``AutoTokenizer`` and vLLM load them from a model directory."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {token: index for index, token in enumerate(vocabulary())}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # Longest words first so a word is never cut by a shorter one that prefixes it.
    words = sorted(WORD_POOL, key=len, reverse=True)
    pattern = " (?:" + "|".join(re.escape(word) for word in words) + ")|[\\s\\S]"
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": PAD,
        "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": False,
    }
    write_json(directory / "tokenizer_config.json", config)
    names = ("bos_token", "eos_token", "unk_token", "pad_token")
    write_json(directory / "special_tokens_map.json", {name: config[name] for name in names})


def write_json(path: Path, payload: dict) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
