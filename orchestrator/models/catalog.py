"""The model configs that ship with the project (``models/configs/*.json``), by name (pure).

Complete Hugging Face ``config.json`` files of the models the sweeps name, so that a model can be sized on
any machine and served with dummy weights (random weights of its exact shapes) where its real weights
cannot be had. A config without ``model_type`` describes only the shapes the sizing needs (a model known
from a publication, not from its files) and is not served.
"""

from __future__ import annotations

import json
from pathlib import Path

CONFIG_DIR = Path(__file__).parent / "configs"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"  # the source study's model, every GPU sweep's default
# The Hugging Face names the sweeps use (and a short one), for the shipped configs they stand for.
ALIASES = {
    LLAMA_8B: "llama-3.1-8b-instruct",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b-instruct",
    "llama-3.1-70b": "llama-3.1-70b-instruct",
    "Qwen/Qwen3-8B": "qwen3-8b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen/Qwen3.6-35B-A3B": "qwen3.6-35b-a3b",
}


def shipped_names() -> list[str]:
    return sorted(path.stem for path in CONFIG_DIR.glob("*.json"))


def servable_names() -> list[str]:
    """The shipped configs complete enough for vLLM to build the model from."""
    return [name for name in shipped_names() if is_servable(shipped_config(name))]


def shipped_name(model: str) -> str | None:
    """The shipped config ``model`` names (itself or its Hugging Face alias), or None."""
    name = ALIASES.get(model, model)
    return name if (CONFIG_DIR / f"{name}.json").is_file() else None


def shipped_config(name: str) -> dict:
    return json.loads((CONFIG_DIR / f"{name}.json").read_text())


def is_servable(config: dict) -> bool:
    return bool(config.get("model_type")) and bool(config.get("architectures"))
