"""The ``kvsweep`` command: its subcommands are the project's programs with the parsers of their older forms."""

from __future__ import annotations

import contextlib
import importlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import COMMANDS, main, sweep_names
from orchestrator.sweep.cli import sweep_main


def help_of(run) -> str:
    """What ``run()`` prints for --help (argparse exits 0 after printing it)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        run()
    assert exit_.value.code == 0
    return out.getvalue()


@pytest.mark.parametrize("name", [name for name in COMMANDS if name != "sweep"])
def test_each_subcommand_takes_the_parser_of_its_older_form(name, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["kvsweep"])
    mine = help_of(lambda: main([name, "--help"]))
    theirs = help_of(lambda: importlib.import_module(COMMANDS[name].module).main(["--help"]))
    assert mine == theirs and "usage:" in mine


def test_a_sweep_by_name_takes_its_scripts_parser_and_grid(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["kvsweep"])
    mine = help_of(lambda: main(["sweep", "cpu_tiny", "--help"]))
    from sweeps.cpu_tiny import SPEC

    monkeypatch.setattr(sys, "argv", ["kvsweep sweep cpu_tiny"])
    assert mine == help_of(lambda: sweep_main(SPEC, ["--help"]))
    assert mine.startswith("usage: kvsweep sweep cpu_tiny ")
    assert {"large_dram", "cpu_tiny", "gpu_pressure"} <= set(sweep_names()) and "crossover" not in sweep_names()


def test_unknown_names_are_one_line_naming_the_valid_ones(capsys):
    assert main(["sweeep"]) == 2
    assert capsys.readouterr().err == f"error: unknown command 'sweeep'; valid: {', '.join(COMMANDS)}\n"
    assert main(["sweep", "large"]) == 2
    assert capsys.readouterr().err == f"error: unknown sweep 'large'; valid: {', '.join(sweep_names())}\n"


def test_the_installed_console_script_lists_every_subcommand():
    script = Path(sys.executable).with_name("kvsweep")
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert all(f"  {name} " in result.stdout for name in COMMANDS)
