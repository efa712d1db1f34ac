"""What a replica serves for a model name: which weights (the model's own or dummy ones), the directory it
loads on this node, and whether the files can be had here, said in one line when they cannot.

Replicas start offline (``HF_HUB_OFFLINE``): a model named by its Hugging Face name must already be in the
node's Hugging Face cache. The check never touches the network, so it answers in a moment on an air-gapped
node instead of failing a minute into a cell.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from orchestrator.inputs.validation import InputError, first_line
from orchestrator.models.dummy import ensure_dummy_model
from orchestrator.models.tiny import TINY_MODEL, ensure_tiny_model
from orchestrator.models.tokenizer import answer_token_ids
from orchestrator.units import GIB

WEIGHT_PATTERNS = ("*.safetensors", "*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


class Weights(str, enum.Enum):
    REAL = "real"  # the model's own files: a directory, the Hugging Face cache, or the tiny model's generated ones
    DUMMY = "dummy"  # random weights of the model's exact shapes (vLLM's --load-format dummy), the project's tokenizer


class ModelUnavailable(InputError):
    """The model's files cannot be had on this node; the message is one line naming the model and the way out."""


@dataclass(frozen=True)
class ServedModel:
    """A model as one node serves it."""

    directory: str
    weights: Weights
    # Answers are restricted to these ids (vLLM's allowed_token_ids): random weights would emit tokens that do
    # not round-trip through the text of the next turn. None: the model answers as it likes.
    answer_token_ids: tuple[int, ...] | None = None
    detail: str = ""  # what was found, for the doctor's table

    @property
    def load_format(self) -> str:
        return "dummy" if self.weights is Weights.DUMMY else "auto"


def served_model(model: str, weights: Weights, need_weights: bool = True) -> ServedModel:
    """``model`` as this node serves it with ``weights``, generating what the project generates (the tiny
    model, a dummy directory). ``need_weights=False`` asks only for what the fake engine reads (config and
    tokenizer). Raises ``ModelUnavailable`` (one line) when the files are not here."""
    if weights is Weights.DUMMY:
        try:
            directory = ensure_dummy_model(model)
        except InputError as error:
            raise ModelUnavailable(str(error)) from None
        detail = f"dummy weights of {model}: its config and the project's tokenizer in {directory}"
        return ServedModel(str(directory), weights, answer_token_ids(), detail)
    if model == TINY_MODEL:
        directory = ensure_tiny_model()
    elif Path(model).is_dir():
        directory = Path(model)
    else:
        directory = _hub_snapshot(model)
    return ServedModel(str(directory), weights, None, _files_detail(model, directory, need_weights))


def _hub_snapshot(model: str) -> Path:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(model, local_files_only=True))
    except Exception as error:  # not in the cache, a malformed name, a broken cache
        why = "" if isinstance(error, LocalEntryNotFoundError) else f": {first_line(error)}"
        raise ModelUnavailable(
            f"model {model!r}: not in this node's Hugging Face cache ({constants.HF_HUB_CACHE}{why}); "
            f"fetch it on every GPU node (`hf download {model}`) or pass --weights dummy to serve random weights of "
            "its exact shapes, with no download"
        ) from None


def _files_detail(model: str, directory: Path, need_weights: bool) -> str:
    """What ``directory`` holds of ``model``; raises ``ModelUnavailable`` when a needed file is missing."""
    weights = sorted(path for pattern in WEIGHT_PATTERNS for path in directory.glob(pattern))
    missing = [name for name, present in (
        ("config.json", (directory / "config.json").is_file()),
        ("tokenizer files", any((directory / name).is_file() for name in TOKENIZER_FILES)),
        ("weight files (*.safetensors)", bool(weights) or not need_weights),
    ) if not present]  # fmt: skip
    if missing:
        raise ModelUnavailable(f"model {model!r}: {directory} has no {' and no '.join(missing)}; complete it, or pass "
                               "--weights dummy to serve random weights of its shapes")  # fmt: skip
    if not need_weights:
        return f"{model}: config and tokenizer in {directory}"
    try:
        with open(weights[0], "rb") as handle:
            handle.read(8)
    except OSError as error:
        raise ModelUnavailable(f"model {model!r}: {weights[0]} cannot be read ({error.strerror or error})") from None
    size_gib = sum(path.stat().st_size for path in weights) / GIB
    return f"{model}: {len(weights)} file(s), {size_gib:.1f} GiB in {directory}"
