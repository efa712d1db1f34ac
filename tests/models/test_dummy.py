"""Dummy-weight model directories: complete configs vLLM itself accepts, the project's tokenizer, answers that
round-trip, and one clear line for a model that cannot be served."""

from __future__ import annotations

import json
import random

import pytest

from orchestrator.models.arch import load_model
from orchestrator.models.catalog import servable_names, shipped_config
from orchestrator.models.dummy import MARKER, ensure_dummy_model
from orchestrator.models.served import ModelUnavailable, Weights, served_model
from orchestrator.models.tokenizer import answer_token_ids, special_token_ids, vocabulary
from orchestrator.sizing.kv import kv_bytes_per_token
from orchestrator.sizing.parallel import tp_problem
from orchestrator.workload.text import TOOL_SEPARATOR, WORD_POOL, tool_output_header
from tests.hf import auto_tokenizer


@pytest.mark.parametrize("name", ["llama-3.1-8b-instruct", "qwen3-8b", "llama-3.1-70b-instruct", "qwen3-30b-a3b"])
def test_a_dummy_directory_is_the_shipped_config_with_the_tokenizers_ids_and_is_built_once(tmp_path, name):
    directory = ensure_dummy_model(name, tmp_path)
    config = json.loads((directory / "config.json").read_text())
    assert config == shipped_config(name) | special_token_ids()
    assert config["vocab_size"] >= len(vocabulary())  # the real embedding and output head: the real weight memory
    assert not list(directory.glob("*.safetensors")) and (directory / MARKER).is_file()
    stamp = (directory / "tokenizer.json").stat().st_mtime_ns
    assert ensure_dummy_model(name, tmp_path) == directory
    assert (directory / "tokenizer.json").stat().st_mtime_ns == stamp
    assert [path.name for path in tmp_path.iterdir()] == [directory.name]  # no staging directory left


def test_the_hugging_face_name_of_a_shipped_config_gets_the_same_directory(tmp_path):
    by_name = ensure_dummy_model("meta-llama/Llama-3.1-8B-Instruct", tmp_path)
    assert by_name == ensure_dummy_model("llama-3.1-8b-instruct", tmp_path)


def test_answers_in_pool_words_round_trip_through_the_next_turns_text(tmp_path):
    """What a dummy-weight replica may answer (``answer_token_ids``), decoded and sent back inside the next
    prompt between the previous context and the tool output, tokenizes to the same ids: the prefix cache then
    hits the whole previous turn."""
    tokenizer = auto_tokenizer(ensure_dummy_model("llama-3.1-8b-instruct", tmp_path))
    allowed = answer_token_ids()
    assert [tokenizer.decode([token]) for token in allowed] == [" " + word for word in WORD_POOL]
    # Why answers are restricted: random weights would also sample special tokens (dropped when decoded) and the
    # ids past the tokenizer's vocabulary that the real-size output head has, neither of which comes back.
    for hazard in ([special_token_ids()["eos_token_id"]], [len(vocabulary()) + 5]):
        sent_back = tokenizer.decode(hazard, skip_special_tokens=True)
        assert tokenizer(sent_back, add_special_tokens=False)["input_ids"] != hazard
    rng = random.Random(7)
    context = tokenizer("[system] river zephyr", add_special_tokens=True)["input_ids"]
    for turn in range(1, 300):
        answer = [rng.choice(allowed) for _ in range(20)]
        tool = TOOL_SEPARATOR + tool_output_header(f"s42-j{turn:05d}", turn) + " ledger quartz"
        text = tokenizer.decode(context + answer, skip_special_tokens=True) + tool
        ids = tokenizer(text)["input_ids"]
        assert ids[: len(context) + len(answer)] == context + answer, f"turn {turn}"
        context = ids


def test_vllm_builds_each_servable_shipped_config_and_caches_what_the_sizing_says(tmp_path):
    """vLLM's own model config over every servable shipped config with dummy weights: the architecture is one
    it supports, and its KV bytes per token (all layers, K and V, per head) are the sizing library's."""
    from vllm.config import ModelConfig

    for name in servable_names():
        directory = ensure_dummy_model(name, tmp_path)
        model = ModelConfig(model=str(directory), max_model_len=4096)
        assert model.architectures == shipped_config(name)["architectures"]
        per_token = 2 * model.hf_config.num_hidden_layers * model.get_total_num_kv_heads() * model.get_head_size() * 2
        assert per_token == kv_bytes_per_token(load_model(name), 2), name


def test_vllm_refuses_exactly_the_degrees_the_sizing_says_split_the_attention_heads_unevenly(tmp_path):
    """vLLM's own parallel check (``ModelConfig.verify_with_parallel_config``) on every servable shipped config. Its
    KV-head rule lives in the sharded layers, which need a process group, so the sizing's tests cover that one."""
    from vllm.config import ModelConfig, ParallelConfig

    for name in servable_names():
        model = ModelConfig(model=str(ensure_dummy_model(name, tmp_path)), max_model_len=4096)
        for tp in (1, 2, 3, 4, 6, 8, 16, 64):
            try:
                model.verify_with_parallel_config(ParallelConfig(tensor_parallel_size=tp))
                refused = None
            except ValueError as error:
                refused = str(error)
            problem = tp_problem(load_model(name), tp)
            assert (refused is None) == (problem is None or "attention heads" not in problem), (name, tp, refused)


def test_a_sizing_only_or_unknown_model_is_refused_in_one_line():
    with pytest.raises(ModelUnavailable) as sizing_only:
        served_model("qwen3.6-35b-a3b", Weights.DUMMY)
    assert "no model_type" in str(sizing_only.value) and "llama-3.1-8b-instruct" in str(sizing_only.value)
    with pytest.raises(ModelUnavailable, match="'nobody/nothing' has no config for dummy weights here"):
        served_model("nobody/nothing", Weights.DUMMY)


def test_real_weights_that_are_not_here_name_the_model_and_the_way_out(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelUnavailable) as missing:
        served_model("meta-llama/Llama-3.1-8B-Instruct", Weights.REAL)
    line = str(missing.value)
    assert "\n" not in line and "'meta-llama/Llama-3.1-8B-Instruct'" in line and "--weights dummy" in line
    assert "hf download meta-llama/Llama-3.1-8B-Instruct" in line
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    (config_only / "config.json").write_text(json.dumps(shipped_config("qwen3-8b")))
    incomplete = r"has no tokenizer files and no weight files \(\*\.safetensors\); complete it, or pass --weights dummy"
    with pytest.raises(ModelUnavailable, match=incomplete):
        served_model(str(config_only), Weights.REAL)
    served = served_model(str(config_only), Weights.DUMMY)
    assert served.load_format == "dummy" and served.answer_token_ids == answer_token_ids()
