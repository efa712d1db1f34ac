"""The scripts under ``sweeps/`` and ``benchmarks/`` are entry points on the installed package: none edits the
import path, and none is named like a module that a dependency imports when it is present (run from its
folder, a script's siblings come first on the path; ``sweeps/bottleneck.py`` once stood in for pandas'
optional ``bottleneck``)."""

from pandas.compat._optional import VERSIONS as PANDAS_OPTIONAL

from orchestrator.paths import PROJECT_ROOT

SCRIPTS = sorted(path for folder in ("sweeps", "benchmarks") for path in (PROJECT_ROOT / folder).glob("*.py")
                 if path.name != "__init__.py")  # fmt: skip


def test_there_are_scripts_to_check():
    assert {"large_dram.py", "crossover.py", "sim_vs_cpu.py"} <= {script.name for script in SCRIPTS}


def test_no_script_edits_the_import_path():
    assert [script.name for script in SCRIPTS if "sys.path" in script.read_text()] == []


def test_no_script_shadows_a_module_pandas_imports_when_present():
    assert sorted({script.stem for script in SCRIPTS} & set(PANDAS_OPTIONAL)) == []
