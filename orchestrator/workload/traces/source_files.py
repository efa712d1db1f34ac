"""Reading the public trace files the importers take: their lines, and JSON documents decoded with the line each
item starts on, so that a malformed item is named by ``file:line``. Every failure is a ``TraceFormatError``."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.workload.traces.schema import TraceFormatError


def file_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as error:
        raise TraceFormatError(str(path), 0, "file", error.strerror or str(error)) from None


def json_document(path: Path, what: str) -> tuple[dict, str]:
    """The file's one JSON object (``what`` it is, for the error), and its text for ``array_items``."""
    text = "\n".join(file_lines(path))
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise TraceFormatError(str(path), error.lineno, "json", f"{error.msg} at column {error.colno}") from None
    if not isinstance(document, dict):
        raise TraceFormatError(str(path), 1, "json", f"{what} is one JSON object, got {type(document).__name__}")
    return document, text


def line_of(text: str, needle: str) -> int:
    offset = text.find(needle)
    return text.count("\n", 0, offset) + 1 if offset >= 0 else 1


def array_items(text: str, key: str, source: str, what: str = "items") -> list[tuple[int, object]]:
    """The items of the document's first ``key`` array, each with the line it starts on (json.loads keeps no
    positions, so the array is decoded item by item)."""
    decoder = json.JSONDecoder()
    found = text.find(f'"{key}"')
    if found < 0:
        raise TraceFormatError(source, 1, key, f"missing; valid: a list of {what}")
    position = text.index(":", found) + 1
    while text[position].isspace():
        position += 1
    if text[position] != "[":
        raise TraceFormatError(source, text.count("\n", 0, found) + 1, key, f"valid: a list of {what}")
    position += 1
    items = []
    while True:
        while text[position] in " \t\r\n,":
            position += 1
        if text[position] == "]":
            return items
        line = text.count("\n", 0, position) + 1
        try:
            item, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise TraceFormatError(source, error.lineno, "json", f"{error.msg} at column {error.colno}") from None
        items.append((line, item))
