"""The ``kvsweep`` command: its subcommands are the project's programs with the parsers of their direct forms."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import random
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.completion import command_parsers
from orchestrator.cli.kvsweep import COMMANDS, main, sweep_names
from orchestrator.cli.sweep import sweep_main


def help_of(run) -> str:
    """What ``run()`` prints for --help (argparse exits 0 after printing it)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        run()
    assert exit_.value.code == 0
    return out.getvalue()


@pytest.mark.parametrize("name", [name for name in COMMANDS if name != "sweep"])
def test_each_subcommand_takes_the_parser_of_its_direct_form(name, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["kvsweep"])
    mine = help_of(lambda: main([name, "--help"]))
    theirs = help_of(lambda: importlib.import_module(COMMANDS[name].module).main(["--help"]))
    assert mine == theirs and "usage:" in mine


def test_a_sweep_by_name_takes_its_scripts_parser_and_grid(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["kvsweep"])
    mine = help_of(lambda: main(["sweep", "cpu_tiny", "--help"]))
    from orchestrator.sweeps.cpu_tiny import SPEC

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


def test_every_parser_says_kvsweep_and_its_docstrings_whole_first_paragraph_in_plain_text(monkeypatch):
    """In either form: the program name no longer comes from how it was started."""
    from orchestrator.inputs.parser import description

    monkeypatch.setattr(sys, "argv", ["python"])
    for name, command in COMMANDS.items():
        if name == "sweep":
            continue
        module = importlib.import_module(command.module)
        text = help_of(lambda: module.main(["--help"]))
        assert text.startswith(f"usage: kvsweep {name} ") and "python -m" not in text, name
        assert module.parser().description == description(module.__doc__), name
    for module in ("orchestrator.cli.doctor", "orchestrator.cli.cell", "orchestrator.cli.bundle", "orchestrator.analysis.report",
                   "orchestrator.sim.gpu_profile", "orchestrator.workload.traces.convert",
                   "orchestrator.sweeps.capacity"):  # fmt: skip
        text = importlib.import_module(module).parser().description
        assert [part for part in ("``", ":func:", "Command line", "python -m") if part in text] == [], module
        assert text[0].isupper() and text.endswith("."), (module, text)
    capacity = importlib.import_module("orchestrator.sweeps.capacity")
    assert capacity.parser().description.endswith("and what a thousand jobs cost.")


def test_a_sweep_says_kvsweep_sweep_and_its_scripts_docstring_run_either_way(monkeypatch):
    from orchestrator.sweeps.bottleneck_ablation import SPEC

    monkeypatch.setattr(sys, "argv", [str(Path("sweeps") / "bottleneck_ablation.py")])
    text = help_of(lambda: sweep_main(SPEC, ["--help"]))
    assert text.startswith("usage: kvsweep sweep bottleneck_ablation ")
    assert "The LMCache bottleneck ablation: LMCache with its CPU tier" in " ".join(text.split())
    assert "Sweep 'bottleneck'" not in text
    monkeypatch.setattr(sys, "argv", ["kvsweep"])
    assert help_of(lambda: main(["sweep", "bottleneck_ablation", "--help"])) == text


def test_description_reads_a_docstring_as_plain_text():
    from orchestrator.inputs.parser import description

    doc = "Command line: the ``kvsweep`` report of :func:`build` and `x`::\n\n    kvsweep report DIR\n"
    assert description(doc) == "The kvsweep report of build and x."
    assert description("``python -m orchestrator.doctor``: the first command\non a new cluster.") == \
        "The first command on a new cluster."  # fmt: skip


def test_the_version_is_the_installed_ones_on_kvsweep_and_every_subcommand(capsys, monkeypatch):
    from importlib import metadata

    from orchestrator.inputs.parser import version_line

    expected = f"kvsweep {metadata.version('kvsweep')}\n"
    assert main(["--version"]) == 0 and capsys.readouterr().out == expected
    for argv in (["sweep", "large_dram", "--version"], ["doctor", "--version"], ["crossover", "--version"]):
        assert help_of(lambda: main(argv)) == expected

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert version_line() == "kvsweep unreleased"


def test_the_engine_flag_says_what_each_engine_runs(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["kvsweep"])
    text = " ".join(help_of(lambda: main(["sweep", "large_dram", "--help"])).split())
    assert "auto: real vLLM on the GPU types the Ray cluster has, the simulator for the others" in text
    assert "vllm: real vLLM for every cell" in text and "stay pending" in text
    assert "sim: the simulator for every cell" in text and "fake: a stand-in server with no model" in text
    from orchestrator.sweeps.large_dram import SPEC

    search = " ".join(help_of(lambda: main(["crossover", "--help"])).split())
    assert "--engine {sim,auto,vllm}" in search and "sim: the search runs in the simulator" in search


def test_every_flag_of_every_command_says_what_it_means_and_its_default():
    """argparse has no public view of a parser's flags; the completion reads ``_actions`` too."""
    unsaid = []
    for path, found in command_parsers():
        name = " ".join(("kvsweep", *path))
        formatter = found._get_formatter()
        for action in found._actions:
            if not action.option_strings or action.dest in ("help", "version"):
                continue
            said = formatter._get_help_string(action)
            has_default = action.nargs != 0 and action.default not in (None, False, (), [], "", argparse.SUPPRESS)
            if not action.help or (has_default and "default" not in said.lower()):
                unsaid.append(f"{name} {action.option_strings[-1]}: {said!r}")
    assert unsaid == []
    cell = " ".join(importlib.import_module("orchestrator.cli.cell").parser().format_help().split())
    assert "--seed SEED seeds the arrival schedule and the tool outputs (default: 42)" in cell
    assert "--out OUT directory for the cell's records (default: results/cell)" in cell


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["capacity", "--slo", "jct_p90=60s", "--gpu", "H100", "--jps", "5"],
         "--jps 5: the search picks its own loads between --jps-min and --jps-max; valid on grid sweeps"),
        (["crossover", "--gpu", "H100", "--load", "2"], "--load 2: the search picks its own loads"),
        (["crossover", "--gpu", "H100", "--gpu-budget", "1h"], "--gpu-budget 1h: a search spends real time through"),
        (["capacity", "--slo", "jct_p90=60s", "--gpu", "H100", "--gpus", "H200"],
         "--gpu H100 and --gpus H200 both name the GPU types searched; valid: one of them"),
        (["crossover", "--gpu", "H100", "--gpus", "H200"], "--gpu H100 and --gpus H200 both name the GPU types"),
    ],
)  # fmt: skip
def test_a_search_refuses_a_flag_it_would_ignore_in_one_line(tmp_path, capsys, argv, line):
    assert main([*argv, "--results-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {line}") and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_a_search_leaves_the_flags_it_refuses_out_of_its_help(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["kvsweep"])
    for name in ("crossover", "capacity"):
        text = help_of(lambda: main([name, "--help"]))
        assert "--jps-min" in text and [flag for flag in ("--jps ", "--load ", "--gpu-budget ") if flag in text] == []


def test_a_cell_names_a_bad_value_by_its_flag(capsys):
    assert main(["cell", "--jps", "0", "--no-checks"]) == 2
    assert capsys.readouterr().err == "error: --jps 0: must be greater than 0\n"


def test_converting_a_file_of_no_known_format_names_the_formats(tmp_path, capsys):
    from orchestrator.workload.traces.convert import FORMATS

    (tmp_path / "random.bin").write_bytes(random.Random(7).randbytes(4096))
    for fmt in FORMATS:
        assert main(["convert", "--format", fmt, str(tmp_path / "random.bin"), "--out", str(tmp_path / "o.jsonl")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {tmp_path / 'random.bin'}:1: json: ") and err.count("\n") == 1
        assert f"valid for --format {fmt}: {FORMATS[fmt]}" in err
        assert all(other in err for other in FORMATS)
    assert not (tmp_path / "o.jsonl").exists()


def test_the_reference_pages_put_command_output_in_blocks_the_site_wraps():
    """A long usage or error line wraps at the page's width instead of hiding behind a scroll bar."""
    docs = Path(__file__).resolve().parents[1] / "docs"
    for page in ("cli.md", "sweeps.md", "errors.md"):
        fences = [line for line in (docs / "reference" / page).read_text().splitlines() if line.startswith("```")]
        assert fences and fences[::2] == ["```text"] * (len(fences) // 2), page
    css = (docs / "stylesheets" / "cli.css").read_text()
    assert "code.language-text" in css and "white-space: pre-wrap" in css
    assert "stylesheets/cli.css" in (docs.parent / "mkdocs.yml").read_text()


def test_the_direct_forms_say_kvsweep_too():
    root = Path(__file__).resolve().parents[1]
    forms = {"usage: kvsweep doctor ": [sys.executable, "-m", "orchestrator.cli.doctor", "--help"],
             "usage: kvsweep sweep large_dram ": [sys.executable, "sweeps/large_dram.py", "--help"]}
    for usage, argv in forms.items():
        result = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and result.stdout.startswith(usage), result.stderr


def _completion(shell: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["completion", shell]) == 0
    return out.getvalue()


def test_the_bash_completion_parses_and_completes_commands_sweeps_flags_and_choices(tmp_path):
    script = tmp_path / "kvsweep.bash"
    script.write_text(_completion("bash"))
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, timeout=60).returncode == 0
    text = script.read_text()
    assert all(f'"kvsweep {name}"' in text for name in COMMANDS) and all(name in text for name in sweep_names())
    assert all(flag in text for flag in ("--results-dir", "--engine", "--slo", "--jps-min", "--traffic-jps",
                                         "--auth-only"))  # fmt: skip
    cases = {"kvsweep ca": "capacity calibrate", "kvsweep sweep cpu": "cpu_tiny",
             "kvsweep sweep large_dram --engine ": "auto vllm sim fake",
             "kvsweep capacity --engine ": "sim auto vllm", "kvsweep pressure ": "predict compare",
             "kvsweep doctor --auth": "--auth-only", "kvsweep sweep large_dram --results-dir ": "",
             "kvsweep crossover --jp": "--jps-min --jps-max"}  # fmt: skip
    for line, expected in cases.items():
        words = " ".join(f"'{word}'" for word in line.split(" "))
        probe = (f"source {script}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _kvsweep; "
                 'echo "${COMPREPLY[*]}"')  # fmt: skip
        result = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60)
        assert result.stdout.strip() == expected, (line, result.stdout, result.stderr)


def test_the_zsh_completion_parses_and_offers_the_same(tmp_path):
    script = tmp_path / "_kvsweep"
    script.write_text(_completion("zsh"))
    assert subprocess.run(["zsh", "-n", str(script)], capture_output=True, timeout=60).returncode == 0
    # The completion system's own functions, stubbed to print what they are given.
    probe = (f"compdef() {{ :; }}; compadd() {{ shift; print -r -- ${{(P)1}}; }}; _files() {{ print files; }}; "
             f"_describe() {{ print -r -- ${{(P)4%%:*}}; }}; source {script}; "
             "words=(kvsweep sweep large_dram --engine ''); CURRENT=5; _kvsweep; "
             "words=(kvsweep sweep ''); CURRENT=3; _kvsweep; words=(kvsweep report ''); CURRENT=3; _kvsweep")  # fmt: skip
    result = subprocess.run(["zsh", "-c", probe], capture_output=True, text=True, timeout=60)
    lines = result.stdout.splitlines()
    assert lines[0] == "auto vllm sim fake" and lines[1].startswith("agent_trace") and lines[2] == "files", result
