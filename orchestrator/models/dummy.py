"""Model directories for dummy weights: a complete ``config.json`` and the project's tokenizer, no weights.

vLLM's ``--load-format dummy`` fills random weights of the config's exact shapes, so weight memory, the
profiling run, the KV block count and every step's cost are the real model's; with answers of a fixed
length (``ignore_eos``, as the source study ran) the serving behaviour is the real model's too. Nothing is
downloaded: the config ships with the project (``models/configs``) or is given as a directory or file, and
the tokenizer is the project's own (``models.tokenizer``), whose exact token counts the workload is sized
with and whose answer words round-trip between turns.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from orchestrator.inputs.validation import InputError
from orchestrator.models.cache import build_once, default_cache_dir
from orchestrator.models.catalog import is_servable, servable_names, shipped_config, shipped_name
from orchestrator.models.tiny import TINY_MODEL, tiny_config
from orchestrator.models.tokenizer import special_token_ids, write_json, write_tokenizer

# Bumped whenever the generated files change, so a cache directory is never stale.
FORMAT_VERSION = 1
MARKER = "kvsweep-dummy.json"  # written last: the directory is complete


def source_config(model: str) -> tuple[str, dict]:
    """The name and ``config.json`` of ``model`` (the tiny model, a shipped config or its Hugging Face name, a
    model directory or a config file). Raises ``InputError`` with one line when there is none vLLM can build."""
    if model == TINY_MODEL:
        return TINY_MODEL, tiny_config()
    valid = f"valid: {', '.join([TINY_MODEL, *servable_names()])}, or a directory or file with a complete config.json"
    if (name := shipped_name(model)) is not None:
        config = shipped_config(name)
    else:
        path = Path(model) / "config.json" if Path(model).is_dir() else Path(model)
        if not path.is_file():
            raise InputError(f"model {model!r} has no config for dummy weights here; {valid}")
        name, config = str(path.parent) if path.name == "config.json" else str(path), json.loads(path.read_text())
    if not is_servable(config):
        raise InputError(f"model {model!r}: its config has no model_type and architectures (the shapes for sizing "
                         f"only), so vLLM cannot build it; {valid}")  # fmt: skip
    return name, config


def dummy_config(config: dict) -> dict:
    """``config`` as a dummy directory carries it: its special tokens are the project tokenizer's."""
    return {**config, **special_token_ids()}


def ensure_dummy_model(model: str, cache_dir: Path | None = None) -> Path:
    """The dummy-weight directory of ``model``, generated first if it is not there yet."""
    name, config = source_config(model)
    config = dummy_config(config)
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", Path(name).name).strip("-").lower()
    target = Path(cache_dir or default_cache_dir()).absolute() / f"dummy-{slug}-v{FORMAT_VERSION}-{digest}"

    def build(directory: Path) -> None:
        write_tokenizer(directory, int(config.get("max_position_embeddings") or 32768))
        write_json(directory / "config.json", config)
        write_json(directory / MARKER, {"model": model, "config_from": name, "weights": "dummy"})

    return build_once(target, MARKER, build)
