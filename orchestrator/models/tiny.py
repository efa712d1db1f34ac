"""A tiny Llama-architecture model with the project's own tokenizer, generated offline and deterministically.

The CPU engine serves it so the real vLLM scheduler, prefix cache and eviction run on a laptop with no
downloads. The output head gives special tokens a zero row and every other token a large random one, so a
greedy decode never emits a special token that detokenization would drop (``models.tokenizer`` says why
the rest round-trips).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.models.cache import build_once, default_cache_dir
from orchestrator.models.tokenizer import SPECIAL_TOKENS, special_token_ids, vocabulary, write_json, write_tokenizer

TINY_MODEL = "tiny"  # the name that stands for this model wherever a model name or directory is asked
# Bumped whenever the generated files change, so a cache directory is never stale.
FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class TinyModelShape:
    """Dimensions of the generated model. Defaults let a 0.25-scale workload run at a few JPS on 2 cores."""

    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    intermediate_size: int = 256
    max_position_embeddings: int = 32768
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * dtype_bytes


def ensure_tiny_model(cache_dir: Path | None = None, shape: TinyModelShape = TinyModelShape()) -> Path:
    """The directory of the tiny model for ``shape``, generating it first if it is not there yet."""
    cache_dir = Path(cache_dir or default_cache_dir()).absolute()
    target = cache_dir / f"tiny-llama-v{FORMAT_VERSION}-h{shape.hidden_size}-l{shape.num_hidden_layers}-s{shape.seed}"

    def build(directory: Path) -> None:
        write_tokenizer(directory, shape.max_position_embeddings)
        write_json(directory / "config.json", tiny_config(shape))
        _write_weights(directory, shape)

    return build_once(target, WEIGHTS_FILE, build)


def tiny_config(shape: TinyModelShape = TinyModelShape()) -> dict:
    """The model's ``config.json``: what the sizing code and the simulator read of it, without generating it."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": len(vocabulary()),
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "head_dim": shape.head_dim,
        "max_position_embeddings": shape.max_position_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        **special_token_ids(),
        "kvsweep_tiny_shape": asdict(shape),
    }


def _write_weights(directory: Path, shape: TinyModelShape) -> None:
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(shape.seed)
    hidden, inner, vocab_size = shape.hidden_size, shape.intermediate_size, len(vocabulary())
    kv_width = shape.num_key_value_heads * shape.head_dim

    def random(*size: int, std: float) -> torch.Tensor:
        return (torch.randn(*size, generator=generator) * std).to(torch.bfloat16)

    tensors = {"model.embed_tokens.weight": random(vocab_size, hidden, std=1.0)}
    for layer in range(shape.num_hidden_layers):
        prefix = f"model.layers.{layer}."
        projection_std = hidden**-0.5
        tensors |= {
            prefix + "self_attn.q_proj.weight": random(hidden, hidden, std=projection_std),
            prefix + "self_attn.k_proj.weight": random(kv_width, hidden, std=projection_std),
            prefix + "self_attn.v_proj.weight": random(kv_width, hidden, std=projection_std),
            prefix + "self_attn.o_proj.weight": random(hidden, hidden, std=projection_std),
            prefix + "mlp.gate_proj.weight": random(inner, hidden, std=projection_std),
            prefix + "mlp.up_proj.weight": random(inner, hidden, std=projection_std),
            prefix + "mlp.down_proj.weight": random(hidden, inner, std=inner**-0.5),
            prefix + "input_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
            prefix + "post_attention_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
        }
    tensors["model.norm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    head = random(vocab_size, hidden, std=1.0)
    head[: len(SPECIAL_TOKENS)] = 0
    tensors["lm_head.weight"] = head
    save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
