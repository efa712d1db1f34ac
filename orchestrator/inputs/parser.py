"""The parser every ``kvsweep`` subcommand starts from, so that each one's usage, help and version read alike, whether
it runs as ``kvsweep NAME`` or in its direct form (``python -m ...``, ``python sweeps/NAME.py``):

- its program name is ``kvsweep NAME``, the form the documentation teaches;
- its description is its module docstring's first paragraph as plain text: reStructuredText markup (literals,
  roles such as :func:) stripped, and a usage the paragraph opens with ("Command line:", a quoted ``python -m X``:)
  left out, since the usage line shows the command;
- it takes ``--version``;
- every flag's help says its default where it has one and the help does not say it already (``HelpSaysDefaults``),
  in its subcommands' parsers too.

Only the standard library is imported, so ``kvsweep --help`` stays quick.
"""

from __future__ import annotations

import argparse
import re
from importlib import metadata

DISTRIBUTION = "kvsweep"
# ":func:`x`", ":mod:`x`": a role and its target; the target is what a reader needs.
_ROLE = re.compile(r":[a-z]+:`([^`]*)`")
_LITERAL = re.compile(r"``([^`]*)``|`([^`]*)`")
# What some docstrings open with: the command itself, which the usage line shows.
_USAGE_PREFIX = re.compile(r"^(?:Command line:\s*|``[^`]*``:\s*)")


def version_line() -> str:
    """``kvsweep 0.1.0``: the installed distribution's version, "unreleased" where the project is not installed."""
    try:
        return f"{DISTRIBUTION} {metadata.version(DISTRIBUTION)}"
    except metadata.PackageNotFoundError:
        return f"{DISTRIBUTION} unreleased"


def plain_text(text: str) -> str:
    """``text`` with its reStructuredText markup stripped and its lines joined into one."""
    text = _ROLE.sub(r"\1", text)
    text = _LITERAL.sub(lambda match: match.group(1) if match.group(1) is not None else match.group(2), text)
    return " ".join(text.split())


def description(doc: str | None) -> str:
    """A docstring's whole first paragraph as one plain sentence or more, for a parser's description: without markup,
    without a usage it opens with, capitalised, ending in a full stop (a paragraph that introduces an example with
    ``::`` or ``:`` ends there)."""
    paragraph = plain_text(_USAGE_PREFIX.sub("", (doc or "").strip().split("\n\n")[0])).rstrip(":").rstrip()
    if not paragraph:
        return ""
    if paragraph[-1] not in ".!?":
        paragraph += "."
    return paragraph[0].upper() + paragraph[1:]


class HelpSaysDefaults(argparse.HelpFormatter):
    """Ends a flag's help with "(default: X)" where the flag takes a value, has a default, and its help does not
    name one already (a help that explains its default in words keeps its words)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text, said = action.help or "", _said(action.default)
        if not action.option_strings or action.nargs == 0 or said is None or "default" in text.lower():
            return text
        return f"{text} (default: {said})"


def _said(default: object) -> str | None:
    """A default as a user types it ('%' escaped for argparse), or None for no default worth saying."""
    if default is None or default is False or default is argparse.SUPPRESS or default in ((), [], ""):
        return None
    if isinstance(default, (list, tuple)):
        default = ",".join(str(item) for item in default)
    return (f"{default:g}" if isinstance(default, float) else str(default)).replace("%", "%%")


class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help says each flag's default; subcommands made with ``add_subparsers`` are of
    this class too."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpSaysDefaults)
        super().__init__(*args, **kwargs)


def command_parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of ``kvsweep NAME``: that program name, ``doc``'s first paragraph as its description (see
    ``description``), a ``--version`` flag, and flags whose help says their defaults (``HelpSaysDefaults``)."""
    parser = CommandParser(prog=f"kvsweep {name}", description=description(doc))
    parser.add_argument("--version", action="version", version=version_line(), help="print kvsweep's version and exit")
    return parser
