"""The token counter loads the tokenizer AutoTokenizer would, by the shorter path where the model names the
generic fast class, and counts as vLLM's tokenizer does."""

from __future__ import annotations

import json

from orchestrator.models.dummy import ensure_dummy_model
from orchestrator.workload.tokenizer import GENERIC_FAST_TOKENIZER, HfTokenCounter, load_tokenizer
from tests.hf import auto_tokenizer

TEXT = "[s42-j00001:turn3:ab12cd34] river zephyr\n{odd} chars: 100%  spaced"


def test_the_generated_models_name_the_generic_class_and_load_the_tokenizer_autotokenizer_loads(tmp_path, tiny_model_dir):
    dummy = ensure_dummy_model("llama-3.1-8b-instruct", tmp_path)
    for directory in (tiny_model_dir, dummy):
        assert json.loads((directory / "tokenizer_config.json").read_text())["tokenizer_class"] == GENERIC_FAST_TOKENIZER
        direct, auto = load_tokenizer(str(directory)), auto_tokenizer(directory)
        assert type(direct) is type(auto)
        for special in (False, True):
            assert direct(TEXT, add_special_tokens=special)["input_ids"] == auto(TEXT, add_special_tokens=special)["input_ids"]
        counter = HfTokenCounter(str(directory))
        assert counter.count_prompt(TEXT) == len(auto(TEXT)["input_ids"]) == counter.count(TEXT) + 1  # the BOS


def test_a_model_of_another_tokenizer_class_goes_through_autotokenizer(tmp_path, tiny_model_dir):
    other = tmp_path / "other"
    other.mkdir()
    for name in ("tokenizer.json", "special_tokens_map.json"):
        (other / name).write_bytes((tiny_model_dir / name).read_bytes())
    config = json.loads((tiny_model_dir / "tokenizer_config.json").read_text()) | {"tokenizer_class": "LlamaTokenizer"}
    (other / "tokenizer_config.json").write_text(json.dumps(config))
    assert type(load_tokenizer(str(other))) is type(auto_tokenizer(other))
