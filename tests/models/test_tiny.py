from __future__ import annotations

import hashlib
import json

from orchestrator.models.tiny import SPECIAL_TOKENS, ensure_tiny_model, vocabulary
from orchestrator.workload.text import WORD_POOL
from tests.hf import auto_tokenizer


def _digests(directory):
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(directory.iterdir())}


def test_generation_is_deterministic_and_cached(tmp_path, tiny_model_dir):
    again = ensure_tiny_model(tmp_path)
    assert _digests(again) == _digests(tiny_model_dir)
    mtime = (again / "model.safetensors").stat().st_mtime_ns
    assert ensure_tiny_model(tmp_path) == again
    assert (again / "model.safetensors").stat().st_mtime_ns == mtime
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".build-")]


def test_config_vocabulary_matches_the_tokenizer(tiny_model_dir):
    config = json.loads((tiny_model_dir / "config.json").read_text())
    tokenizer = auto_tokenizer(tiny_model_dir)
    assert config["vocab_size"] == len(tokenizer) == len(vocabulary())
    assert config["architectures"] == ["LlamaForCausalLM"]


def test_pool_words_are_single_tokens_and_text_round_trips(tiny_model_dir):
    tokenizer = auto_tokenizer(tiny_model_dir)
    for word in WORD_POOL:
        assert len(tokenizer(" " + word, add_special_tokens=False)["input_ids"]) == 1
    text = "[s42-j00001:turn3:ab12cd34] river zephyr\n{odd} chars: 100%  spaced"
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_generated_tokens_round_trip_when_sent_back(tiny_model_dir):
    """Any sequence of non-special tokens, decoded and re-encoded, gives the same ids (prefix caching needs it)
    unless its characters spell a pool word; a fixed pseudo-random sample checks the common case."""
    import random

    tokenizer = auto_tokenizer(tiny_model_dir)
    normal_ids = list(range(len(SPECIAL_TOKENS), len(vocabulary())))
    rng = random.Random(3)
    mismatches = 0
    for _ in range(200):
        ids = [rng.choice(normal_ids) for _ in range(20)]
        again = tokenizer(tokenizer.decode(ids), add_special_tokens=False)["input_ids"]
        mismatches += again != ids
    assert mismatches <= 4
