"""The ``kvsweep`` command: one entry point whose subcommands are the project's programs, each with the very parser
of its direct form (``python sweeps/NAME.py``, ``python -m ...``), which works as well.

    kvsweep sweep large_dram --engine sim        # = python sweeps/large_dram.py --engine sim
    kvsweep report results/large_dram            # = python -m orchestrator.analysis.report results/large_dram
    kvsweep doctor --help
    kvsweep --version                            # kvsweep 0.1.0

Every subcommand's parser starts from ``inputs.parser.command_parser``: its usage reads ``kvsweep NAME`` in either form.
A subcommand's module is imported only when it runs, so ``kvsweep --help`` starts in a moment and a program's own
dependencies (Ray, MLflow, vLLM) load only for the programs that need them.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from orchestrator.inputs.parser import version_line
from orchestrator.paths import sweeps_dir


@dataclass(frozen=True)
class Command:
    module: str  # whose main(argv) runs it; "sweeps" for a sweep by name
    summary: str
    direct_module: str = ""  # the name its direct form runs by, where that is not ``module``

    @property
    def direct_form(self) -> str:
        """The command it is without ``kvsweep``: its script, or its module run by ``python -m``."""
        if self.module.startswith("sweeps"):
            return f"python sweeps/{self.module.partition('.')[2] or 'NAME'}.py"
        return f"python -m {self.direct_module or self.module.removesuffix('.__main__')}"


COMMANDS: dict[str, Command] = {
    "sweep": Command("sweeps", "run a sweep of sweeps/ by name: its grid, flags and report"),
    "crossover": Command("orchestrator.sweeps.crossover", "search for the load where the winning policy changes"),
    "capacity": Command("orchestrator.sweeps.capacity",
                        "each policy's capacity under an SLO, the GPUs a traffic needs, their cost"),
    "report": Command("orchestrator.analysis.report", "the HTML report, tables and plots of a sweep's results"),
    "doctor": Command("orchestrator.cli.doctor", "check a Ray cluster's nodes before a sweep", "orchestrator.doctor"),
    "sizing": Command("orchestrator.sizing.__main__", "KV pool, CPU tier and regime of a model on a GPU type"),
    "cell": Command("orchestrator.cli.cell", "one real cell on this machine, no Ray, no tracking"),
    "evidence": Command("orchestrator.cli.evidence", "a GPU node's evidence in one command, within a time budget"),
    "pressure": Command("orchestrator.cli.pressure", "the pressure plan's predictions, and a run beside them"),
    "convert": Command("orchestrator.workload.traces.convert", "an agent trace into the project's trace format"),
    "bundle": Command("orchestrator.cli.bundle", "an offline wheelhouse of a tested stack for air-gapped nodes"),
    "calibrate": Command("orchestrator.sim.calibrate", "the simulator's calibration against the measured cells"),
    "profile": Command("orchestrator.sim.gpu_profile", "a GPU's scheduler traces as the simulator's rates"),
    "refit": Command("orchestrator.cli.refit", "a budgeted sweep's cells re-predicted with rates refit from its measured ones"),
    "completion": Command("orchestrator.cli.completion", "a bash or zsh completion script for kvsweep, from its parsers"),
}


def sweep_names() -> list[str]:
    """The sweeps of ``sweeps/`` that ``kvsweep sweep`` runs: the scripts that run their ``SPEC`` as a sweep (the
    crossover and capacity searches have commands of their own)."""
    return sorted(path.stem for path in sweeps_dir().glob("*.py") if "sweep_main(SPEC)" in path.read_text())


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: kvsweep [--version] COMMAND [ARGS ...]", "", "Measure KV-cache policies for LLM agent serving.",
             "", "commands (each takes --help; the form after = keeps working):"]  # fmt: skip
    for name, command in COMMANDS.items():
        lines.append(f"  {name:<{width}}  {command.summary} (= {command.direct_form})")
    lines += ["", f"sweeps: {', '.join(sweep_names())}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    if args[0] == "--version":
        print(version_line())
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}; valid: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    if name == "sweep":
        return _sweep(rest)
    return importlib.import_module(COMMANDS[name].module).main(rest)


def _sweep(args: list[str]) -> int:
    names = sweep_names()
    if not args or args[0] in ("-h", "--help"):
        print(f"usage: kvsweep sweep NAME [flags]   (NAME --help for its flags)\n\nsweeps: {', '.join(names)}")
        return 0 if args else 2
    if args[0] not in names:
        print(f"error: unknown sweep {args[0]!r}; valid: {', '.join(names)}", file=sys.stderr)
        return 2
    from orchestrator.cli.sweep import sweep_main

    return sweep_main(importlib.import_module(f"orchestrator.sweeps.{args[0]}").SPEC, args[1:], args[0])


if __name__ == "__main__":
    sys.exit(main())
