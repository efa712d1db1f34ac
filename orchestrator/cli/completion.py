"""Shell completion for ``kvsweep``, written from its parsers so that it cannot drift from them.

    kvsweep completion bash > ~/.local/share/bash-completion/completions/kvsweep   # or: source <(kvsweep ...)
    kvsweep completion zsh > ~/.zfunc/_kvsweep    # with fpath+=(~/.zfunc) before compinit; or: source <(...)

The script completes the subcommands, the sweeps' names after ``sweep``, the sub-subcommands (``pressure predict``),
each command's flags (those its help shows), the choices of a flag that has them (``--engine``, ``--weights``) and,
for a flag that takes a path or any other value and for a command's positional arguments, falls back to the shell's
own completion of file names. It is a snapshot: write it again after an upgrade that adds commands or flags.

Method: the parsers form a tree (``kvsweep``, then each subcommand, each sweep under ``sweep``, each subparser under
its command); each node is reached by the words that lead to it, and the script walks the words typed so far down the
tree, then offers what that node takes. Nodes that take the same words (every sweep's) share one branch of the script.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from orchestrator.cli.kvsweep import COMMANDS, sweep_names
from orchestrator.inputs.parser import command_parser, description


@dataclass(frozen=True)
class Node:
    """What one command takes, reached by ``path``, the words after ``kvsweep`` that lead to it."""

    path: tuple[str, ...]
    flags: tuple[tuple[str, str], ...]  # every option string its help shows, with a short description
    choices: tuple[tuple[str, tuple[str, ...]], ...]  # a flag's choices, where it has them
    valued: tuple[str, ...]  # the flags that take a value of no fixed choice (a path, a number, a name)
    subcommands: tuple[tuple[str, str], ...]  # the words that lead further down, with a short description
    takes_files: bool  # a positional argument of no fixed choice: the shell completes file names

    @property
    def name(self) -> str:
        """The node as the script names it: ``kvsweep`` and the words that lead to it."""
        return " ".join(("kvsweep", *self.path))

    def takes(self) -> tuple:
        """What the script offers at this node, without where it is: nodes alike share one branch."""
        return self.flags, self.choices, self.valued, self.subcommands, self.takes_files


def short(text: str | None) -> str:
    """A help text's first clause, its default left out: a completion menu shows one short line."""
    clauses = [clause.strip() for clause in (text or "").replace("%%", "%").split(";")]
    kept = [clause for clause in clauses if clause and not clause.startswith("default:")]
    first = kept[0] if kept else ""
    return first if len(first) <= 70 else first[:67].rsplit(" ", 1)[0].rstrip(",:") + "..."


def parsers_of(path: tuple[str, ...],
               parser: argparse.ArgumentParser) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """``parser`` at ``path``, then each of its subparsers' (and theirs) at its own path."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers_of((*path, name), child)


def command_parsers() -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser of ``kvsweep`` by the words that lead to it: each sweep's, each subcommand's and theirs, from the
    ``parser()`` of each one's module (imported here); not ``kvsweep`` itself nor ``kvsweep sweep``, which
    ``cli.kvsweep.main`` reads by hand."""
    from orchestrator.cli.sweep import parser as sweep_parser
    from orchestrator.cli.sweep import sweep_doc

    for name in sweep_names():
        spec = importlib.import_module(f"orchestrator.sweeps.{name}").SPEC
        yield from parsers_of(("sweep", name), sweep_parser(spec, f"sweep {name}", sweep_doc(name)))
    for name, command in COMMANDS.items():
        if name != "sweep":
            yield from parsers_of((name,), importlib.import_module(command.module).parser())


def node_of(path: tuple[str, ...], parser: argparse.ArgumentParser) -> Node:
    """The node of ``parser`` at ``path``. Reads ``parser._actions``: argparse has no public view of a parser's
    arguments, and every completion generator reads the same."""
    flags, choices, valued, subcommands, takes_files = [], [], [], [], False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            subcommands += [(name, short(helps.get(name))) for name in action.choices]
        elif not action.option_strings:
            subcommands += [(str(choice), "") for choice in action.choices or ()]
            takes_files = takes_files or not action.choices
        elif action.help != argparse.SUPPRESS:
            flags += [(option, short(action.help)) for option in action.option_strings]
            if action.choices:
                choices.append((action.option_strings[-1], tuple(map(str, action.choices))))
            elif action.nargs != 0:
                valued += action.option_strings
    return Node(path, tuple(flags), tuple(choices), tuple(valued), tuple(subcommands), takes_files)


def command_tree() -> list[Node]:
    """Every node of ``kvsweep``: the command itself, ``kvsweep sweep``, and each of ``command_parsers``."""
    from orchestrator.cli.sweep import sweep_doc

    helps = (("-h", "list the commands"), ("--help", "list the commands"))
    commands = tuple((name, command.summary) for name, command in COMMANDS.items())
    nodes = [Node((), (*helps, ("--version", "print kvsweep's version and exit")), (), (), commands, False)]
    sweeps = tuple((name, short(description(sweep_doc(name)))) for name in sweep_names())
    nodes.append(Node(("sweep",), helps, (), (), sweeps, False))
    return nodes + [node_of(path, parser) for path, parser in command_parsers()]


def _branches(nodes: list[Node]) -> list[tuple[list[str], Node]]:
    """The nodes grouped by what they take: each group's names (its path's words) and one node of it."""
    groups: dict[tuple, tuple[list[str], Node]] = {}
    for node in nodes:
        groups.setdefault(node.takes(), ([], node))[0].append(node.name)
    return list(groups.values())


def _walk_cases(nodes: list[Node]) -> list[str]:
    """``case`` branches that move ``node`` one word down the tree (the same in bash and zsh); a subcommand word that
    leads to no node of its own (a positional argument's choice) moves nothing."""
    names = {node.name for node in nodes}
    return [f'            "{node.name} {word}") node="{node.name} {word}";;' for node in nodes
            for word, _ in node.subcommands if f"{node.name} {word}" in names]  # fmt: skip


def _prev_case(cases: list[str]) -> list[str]:
    """A node's branch's end: what the word before the cursor, a flag, takes (the same in bash and zsh)."""
    inner = ['            case "$prev" in', *(f"                {case}" for case in cases), "            esac"]
    return [*(inner if cases else []), "            ;;"]


def _quoted(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def _bash_words(pairs: tuple[tuple[str, str], ...]) -> str:
    """A word list as bash's ``compgen -W`` takes it: one quoted string."""
    return _quoted(" ".join(word for word, _ in pairs))


def _zsh_words(pairs: tuple[tuple[str, str], ...]) -> str:
    """A word list as zsh's ``_describe`` takes it: an array of ``word:description`` (a colon in a word escaped)."""
    entries = (":".join([word.replace(":", r"\:"), *([text] if text else [])]) for word, text in pairs)
    return "(" + " ".join(map(_quoted, entries)) + ")"


@dataclass(frozen=True)
class Shell:
    """What one shell's script says in its own words; the walk down the tree and the branches are shared."""

    head: tuple[str, ...]  # the script's first lines, up to the function's local variables
    words: str  # the array of the words typed
    cursor: str  # the index of the word being completed
    first_word: int  # the index of the word after ``kvsweep``
    word_list: Callable[[tuple[tuple[str, str], ...]], str]  # a list of words (with descriptions) as assigned
    on_value: str  # what the script does after a flag that takes a value of no fixed choice
    tail: tuple[str, ...]  # the function's end: offering the words, then registering it


SHELLS = {
    "bash": Shell(
        head=("# kvsweep completion for bash, written by `kvsweep completion bash` from kvsweep's parsers.",
              "_kvsweep() {",
              "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} node=kvsweep word i",
              "    local flags='' subcommands='' files='' values=''"),
        words="COMP_WORDS", cursor="COMP_CWORD", first_word=1, word_list=_bash_words,
        on_value="return;;  # a value of no fixed choice: the shell completes file names",
        tail=('    if [[ -n $values ]]; then words=$values',
              '    elif [[ $cur == -* ]]; then words=$flags',
              '    elif [[ -n $subcommands ]]; then words=$subcommands',
              '    elif [[ -n $files ]]; then return',
              '    else words=$flags; fi',
              '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
              "}",
              "complete -o default -F _kvsweep kvsweep")),
    "zsh": Shell(
        head=("#compdef kvsweep",
              "# kvsweep completion for zsh, written by `kvsweep completion zsh` from kvsweep's parsers.",
              "_kvsweep() {",
              "    local node=kvsweep word i cur=${words[CURRENT]} prev=${words[CURRENT-1]} files=''",
              "    local -a flags subcommands values"),
        words="words", cursor="CURRENT", first_word=2, word_list=_zsh_words,
        on_value="_files; return;;  # a value of no fixed choice",
        tail=("    if (( ${#values} )); then compadd -a values",
              "    elif [[ $cur == -* ]]; then _describe -t options 'option' flags",
              "    elif (( ${#subcommands} )); then _describe -t commands 'command' subcommands",
              "    elif [[ -n $files ]]; then _files",
              "    else _describe -t options 'option' flags; fi",
              "}",
              "if [[ $zsh_eval_context[-1] == loadautofunc ]]; then",
              '    _kvsweep "$@"',
              "else",
              "    compdef _kvsweep kvsweep",
              "fi")),
}  # fmt: skip


def script(nodes: list[Node], shell: Shell) -> str:
    """The completion script of ``nodes`` (``command_tree``) for ``shell``: walk the words typed down the tree, then
    offer the choices of the flag before the cursor, else the node's flags, subcommands or file names."""
    lines = [*shell.head,
             f"    for ((i = {shell.first_word}; i < {shell.cursor}; i++)); do",
             f"        word=${{{shell.words}[i]}}",
             '        case "$node $word" in',
             *_walk_cases(nodes),
             "        esac",
             "    done",
             '    case "$node" in']  # fmt: skip
    for names, node in _branches(nodes):
        lines += ["        " + "|".join(f'"{name}"' for name in names) + ")",
                  f"            flags={shell.word_list(node.flags)}",
                  f"            subcommands={shell.word_list(node.subcommands)}",
                  f"            files={'yes' if node.takes_files else _quoted('')}"]  # fmt: skip
        cases = [f"{flag}) values={shell.word_list(tuple((word, '') for word in words))};;"
                 for flag, words in node.choices]  # fmt: skip
        cases += [f"{'|'.join(node.valued)}) {shell.on_value}"] if node.valued else []
        lines += _prev_case(cases)
    return "\n".join([*lines, "    esac", *shell.tail]) + "\n"


def parser() -> argparse.ArgumentParser:
    p = command_parser("completion", __doc__)
    p.add_argument("shell", choices=list(SHELLS), help="the shell to complete kvsweep in")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    print(script(command_tree(), SHELLS[args.shell]), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
