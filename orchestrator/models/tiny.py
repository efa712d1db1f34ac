"""A tiny Llama-architecture model with its own tokenizer, generated offline and deterministically.

The CPU engine serves it so the real vLLM scheduler, prefix cache and eviction run on a laptop with no
downloads. Its tokenizer makes every pool word (with its leading space) one token and every other
character one token, so prompt sizes are predictable and text round-trips exactly: what the model
generates, once decoded and sent back in the next turn, tokenizes to the same ids, which the prefix cache
needs. The output head gives special tokens a zero row and every other token a large random one, so a
greedy decode never emits a special token that detokenization would drop.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.workload.text import WORD_POOL

TINY_MODEL = "tiny"  # the name that stands for this model wherever a model name or directory is asked
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
BOS, EOS = "<s>", "</s>"
# Bumped whenever the generated files change, so a cache directory is never stale.
FORMAT_VERSION = 1


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


def vocabulary() -> list[str]:
    """Token strings by id: specials, then each pool word with its leading space, then single characters."""
    characters = [chr(code) for code in range(32, 127)] + ["\n", "\t"]
    return [*SPECIAL_TOKENS, *(" " + word for word in WORD_POOL), *characters]


def default_cache_dir() -> Path:
    root = os.environ.get("KVSWEEP_CACHE") or Path.home() / ".cache" / "kvsweep"
    return Path(root) / "models"


def ensure_tiny_model(cache_dir: Path | None = None, shape: TinyModelShape = TinyModelShape()) -> Path:
    """The directory of the tiny model for ``shape``, generating it first if it is not there yet.

    Generation writes into a temporary sibling and renames it into place, so a concurrent or interrupted
    build never leaves a half-written model behind.
    """
    cache_dir = Path(cache_dir or default_cache_dir()).absolute()
    target = cache_dir / f"tiny-llama-v{FORMAT_VERSION}-h{shape.hidden_size}-l{shape.num_hidden_layers}-s{shape.seed}"
    if (target / "model.safetensors").exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-", dir=cache_dir))
    try:
        _write_tokenizer(staging)
        _write_config(staging, shape)
        _write_weights(staging, shape)
        try:
            staging.rename(target)
        except OSError:
            if not (target / "model.safetensors").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_tokenizer(directory: Path) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {token: index for index, token in enumerate(vocabulary())}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
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
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": TinyModelShape.max_position_embeddings,
        "clean_up_tokenization_spaces": False,
    }
    _write_json(directory / "tokenizer_config.json", config)
    _write_json(directory / "special_tokens_map.json", {k: config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token")})


def _write_config(directory: Path, shape: TinyModelShape) -> None:
    _write_json(directory / "config.json", tiny_config(shape))


def tiny_config(shape: TinyModelShape = TinyModelShape()) -> dict:
    """The model's ``config.json``: what the sizing code and the simulator read of it, without generating it."""
    tokens = vocabulary()
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": len(tokens),
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
        "bos_token_id": tokens.index(BOS),
        "eos_token_id": tokens.index(EOS),
        "pad_token_id": tokens.index("<pad>"),
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
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})


def _write_json(path: Path, payload: dict) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
