"""Hugging Face's own loading, which the tests compare the project's against."""

from __future__ import annotations

from pathlib import Path


def auto_tokenizer(directory: Path | str):
    """``AutoTokenizer``'s load of a model directory. Imported when called: transformers' auto classes take about
    4 s to import, which every test process would otherwise pay at collection."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))
