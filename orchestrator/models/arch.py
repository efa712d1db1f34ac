"""A model's KV-relevant architecture, read from an HF-style ``config.json``.

Only the layers with a growing KV cache count: every layer of a dense model, the ``full_attention``
layers of a hybrid (Gated DeltaNet / linear-attention layers keep a fixed-size state instead), and for
MLA models (DeepSeek) one compressed latent per token rather than a key and a value per head.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from orchestrator.models.catalog import shipped_config, shipped_name, shipped_names
from orchestrator.models.tiny import TINY_MODEL, tiny_config


@dataclass(frozen=True)
class ModelArch:
    name: str
    num_layers: int
    num_kv_layers: int  # layers with a growing per-token KV cache
    num_kv_heads: int
    head_dim: int
    latent_dim: int | None  # MLA: width of the cached latent (no separate K and V)
    num_parameters: float  # all of them (every expert of an MoE)
    weight_dtype_bytes: float
    num_attention_heads: int = 0  # query heads: the attention FLOPs of a token
    active_parameters: float = 0.0  # what one token's forward pass multiplies by (routed experts only)
    hidden_size: int = 0  # width of the activations a tensor-parallel layer all-reduces; 0 where not known


def load_model(name_or_path: str) -> ModelArch:
    """A shipped config by name (``llama-3.1-8b-instruct``), the generated tiny model (``tiny``), a model
    directory, or a ``config.json``."""
    if name_or_path == TINY_MODEL:
        return arch_from_config(tiny_config(), name=TINY_MODEL)
    if (name := shipped_name(name_or_path)) is not None:
        return arch_from_config(shipped_config(name), name=name)
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ValueError(f"unknown model {name_or_path!r}: not a shipped config ({', '.join(shipped_names())}), "
                         "a model directory or a config.json")  # fmt: skip
    return arch_from_config(json.loads(path.read_text()), name=str(name_or_path))


def arch_from_config(config: dict, name: str = "model") -> ModelArch:
    config = config.get("text_config", config)  # multimodal wrappers keep the language model inside
    layers = config["num_hidden_layers"]
    heads = config.get("num_attention_heads", 1)
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    latent = None
    if config.get("kv_lora_rank"):  # MLA
        latent = config["kv_lora_rank"] + config.get("qk_rope_head_dim", 0)
    return ModelArch(
        name=name,
        num_layers=layers,
        num_kv_layers=_kv_layers(config, layers),
        num_kv_heads=config.get("num_key_value_heads", heads),
        head_dim=head_dim,
        latent_dim=latent,
        num_parameters=float(config.get("num_parameters") or estimate_parameters(config)),
        weight_dtype_bytes={"float32": 4, "float16": 2, "bfloat16": 2}.get(config.get("torch_dtype", "bfloat16"), 2),
        num_attention_heads=heads,
        active_parameters=_active_parameters(config),
        hidden_size=config.get("hidden_size", 0),
    )


def _kv_layers(config: dict, layers: int) -> int:
    if "layer_types" in config:
        return sum(kind in ("full_attention", "attention", "sliding_attention") for kind in config["layer_types"])
    if config.get("full_attention_interval"):
        return layers // config["full_attention_interval"]
    return layers


def _active_parameters(config: dict) -> float:
    """Parameters one token passes through: all of a dense model's, only the routed experts of an MoE."""
    experts = config.get("num_experts") or config.get("n_routed_experts")
    if not experts:
        return float(config.get("num_parameters") or estimate_parameters(config))
    return estimate_parameters(config, experts_per_token=config.get("num_experts_per_tok", experts))


def estimate_parameters(config: dict, experts_per_token: int | None = None) -> float:
    """Parameters of a Llama-style decoder from its shapes (attention, gated MLP or experts, embeddings);
    with ``experts_per_token``, only the experts one token is routed to."""
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv_heads = config.get("num_key_value_heads", heads)
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    if config.get("num_experts") or config.get("n_routed_experts"):
        experts = experts_per_token or config.get("num_experts") or config["n_routed_experts"]
        mlp = 3 * hidden * config["moe_intermediate_size"] * (experts + config.get("n_shared_experts", 0))
    else:
        mlp = 3 * hidden * config["intermediate_size"]
    embeddings = config["vocab_size"] * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return config["num_hidden_layers"] * (attention + mlp + 2 * hidden) + embeddings
