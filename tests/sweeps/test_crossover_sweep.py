"""The crossover search end to end on the simulator (the search's own process, joining the test process's Ray
cluster, and a real MLflow store): on the H200, fcfs and Continuum tie at light load and Continuum wins at heavy
load, and the search brackets the change to the resolution. Killed mid-search, a re-run finishes it with the same
answer and runs no cell twice. A resolution of 2 JPS takes two rounds (the start loads, one bisection): enough
to kill the search in its second."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from orchestrator.paths import PROJECT_ROOT
from orchestrator.records.cell import CellStatus
from tests.sweep.conftest import runs_by_key

SWEEP = "crossover-H200-fcfs-continuum"
RESOLUTION = 2
FLAGS = ["--gpu", "H200", "--policies", "fcfs,continuum", "--engine", "sim", "--jps-min", "1", "--jps-max", "15",
         "--resolution", str(RESOLUTION), "--duration-s", "20", "--progress-interval-s", "60"]  # fmt: skip


def crossover(results: Path, cluster) -> subprocess.Popen:
    command = [sys.executable, str(PROJECT_ROOT / "sweeps" / "crossover.py"), "--results-dir", str(results), *FLAGS,
               "--ray-address", cluster.address]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def finished(process: subprocess.Popen, timeout_s: float = 240) -> str:
    output, _ = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, output[-3000:]
    return output


def test_the_search_brackets_the_change_and_resumes_after_a_kill_with_the_same_answer(ray_cluster, tmp_path):
    whole = tmp_path / "whole"
    output = finished(crossover(whole, ray_cluster))
    flips = pd.read_csv(whole / SWEEP / "crossover.csv")
    assert len(flips) == 1, output[-2000:]
    flip = flips.iloc[0]
    assert (flip.sim_below, flip.sim_above) == ("tie", "continuum") and flip.jps_above - flip.jps_below <= RESOLUTION
    verdicts = pd.read_csv(whole / SWEEP / "report" / "tables" / "verdicts.csv")
    assert len(verdicts) >= 6  # five start loads and at least one bisection

    resumed = tmp_path / "resumed"
    first = crossover(resumed, ray_cluster)
    rounds_seen = 0
    for line in first.stdout:  # stop it in its second round, once the start loads are done
        rounds_seen += "measuring sim at" in line
        if rounds_seen == 2:
            time.sleep(1.0)
            first.send_signal(signal.SIGTERM)
            break
    first.communicate(timeout=60)
    assert first.returncode != 0
    finished(crossover(resumed, ray_cluster))
    assert pd.read_csv(resumed / SWEEP / "crossover.csv").equals(flips)
    done_per_cell = [sum(run.status is CellStatus.DONE for run in runs) for runs in runs_by_key(resumed, SWEEP).values()]
    assert done_per_cell and all(count == 1 for count in done_per_cell)


def test_a_dry_run_of_the_cpu_engines_search_shows_its_profiling_cell_and_runs_nothing(ray_cluster, tmp_path):
    """The script plans its search on a connected cluster (the shared one: a dry run starts nothing on it)."""
    command = [sys.executable, str(PROJECT_ROOT / "sweeps" / "crossover.py"), "--results-dir", str(tmp_path),
               "--gpu", "cpu", "--policies", "fcfs,continuum", "--jps-max", "6", "--dry-run", "--ray-address",
               ray_cluster.address]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "cpu fcfs jps=2 dram=0 seed=7" in result.stdout  # the profiling cell, on a seed of its own
    assert "then the search starts at 1, 1.565, 2.449, 3.834, 6 jobs per second" in result.stdout
    assert not any(tmp_path.rglob("summary.parquet"))
