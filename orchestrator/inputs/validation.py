"""Turning input errors into the one line a user sees before any expensive work starts."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from typing import TypeVar

from pydantic import ValidationError

# pydantic's bound errors as what the value must be, from the bound in the error's context.
_BOUNDS = {"greater_than": "greater than {gt}", "greater_than_equal": "{ge} or more", "less_than": "less than {lt}",
           "less_than_equal": "{le} or less"}  # fmt: skip


class InputError(ValueError):
    """Bad input, found before anything expensive started; the message is one line naming the value."""


T = TypeVar("T")


class Registry(Mapping[str, T]):
    """Things of one kind by name, in the order given: the project's one style of registry (policies, their
    mechanisms, routers, stacks). An unknown name raises ``error`` (an ``InputError`` by default) in one line naming
    it and every valid name, never a bare ``KeyError``."""

    def __init__(self, kind: str, entries: Mapping[str, T], error: type[InputError] = InputError):
        self.kind = kind
        self._entries = dict(entries)
        self._error = error

    def __getitem__(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise self._error(f"unknown {self.kind} {name!r}; known: {', '.join(self._entries)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, name: str, default: T | None = None) -> T | None:
        return self._entries.get(name, default)


def one_line(error: ValidationError) -> str:
    """The first problem of a pydantic error as one line: field, message, and the value given."""
    first = error.errors()[0]
    message = first["msg"].removeprefix("Value error, ")
    # A union's member is in the location too ("constrained-float", "tuple[int, ...]"): fields are identifiers.
    field = ".".join(str(part) for part in first["loc"] if isinstance(part, int) or part.isidentifier())
    if not first["loc"] or isinstance(first.get("input"), dict):  # a check across fields names the values itself
        return f"{field}: {message}" if field else message
    return f"{field}: {message} (got {first.get('input')!r})"


def flag_line(error: ValidationError, flag_of: Mapping[tuple[str, ...], str], args: argparse.Namespace) -> str:
    """The first problem of ``error`` as one line naming the flag that set the field, the value given to it and what
    is valid: ``--scale 0: must be greater than 0``. ``flag_of`` maps a field's location (as pydantic's errors give
    it, without list indexes) to its flag's dest in ``args``. A problem of a field no given flag set, or of a check
    across fields (which names its values itself), is worded as ``one_line`` words it."""
    first = error.errors()[0]
    location = tuple(part for part in first["loc"] if isinstance(part, str) and part.isidentifier())
    dest = flag_of.get(location)
    given = getattr(args, dest, None) if dest else None
    if given is None or isinstance(first.get("input"), dict):
        return one_line(error)
    shown = " ".join(given) if isinstance(given, list) else f"{given:g}" if isinstance(given, float) else str(given)
    if first["type"] in _BOUNDS:
        bounds = {name: f"{bound:g}" for name, bound in first["ctx"].items()}
        problem = "must be " + _BOUNDS[first["type"]].format(**bounds)
    else:
        problem = first["msg"].removeprefix("Value error, ")
        problem = problem[:1].lower() + problem[1:]
    return f"--{dest.replace('_', '-')} {shown}: {problem}"


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
