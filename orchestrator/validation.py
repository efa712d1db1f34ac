"""Turning input errors into the one line a user sees before any expensive work starts."""

from __future__ import annotations

from pydantic import ValidationError


class InputError(ValueError):
    """Bad input, found before anything expensive started; the message is one line naming the value."""


def one_line(error: ValidationError) -> str:
    """The first problem of a pydantic error as one line: field, message, and the value given."""
    first = error.errors()[0]
    message = first["msg"].removeprefix("Value error, ")
    # A union's member is in the location too ("constrained-float", "tuple[int, ...]"): fields are identifiers.
    field = ".".join(str(part) for part in first["loc"] if isinstance(part, int) or part.isidentifier())
    if not first["loc"] or isinstance(first.get("input"), dict):  # a check across fields names the values itself
        return f"{field}: {message}" if field else message
    return f"{field}: {message} (got {first.get('input')!r})"


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
