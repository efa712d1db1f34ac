"""The sweep as users run it: ``ray job submit --working-dir . -- python sweeps/cpu_tiny.py`` against a
local ``ray start --head`` with token authentication, as the recipes start theirs (``secure_ray_head``), then
``ray job stop``. Results must land in the absolute results directory, not in the job's temporary copy of the
working directory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.paths import PROJECT_ROOT
from tests.processes import wait_until_gone
from tests.sweep.conftest import runs_by_key

pytestmark = pytest.mark.engine

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def ray_cli(secure_ray_head):
    """The `ray` command with the head's token in ~/.ray/auth_token and the head's virtualenv first on the PATH
    (a job's `python`)."""
    env = secure_ray_head.client_env() | {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "RAY_AUTH_MODE": "token"}

    def run(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "ray"), *args], capture_output=True, text=True, timeout=timeout_s,
                              cwd=PROJECT_ROOT, env=env)  # fmt: skip

    return run


@pytest.fixture(scope="module")
def job_server(secure_ray_head) -> str:
    return secure_ray_head.job_api


def submit(ray_cli, *args: str) -> subprocess.CompletedProcess:
    """`ray job submit`, again while the head's dashboard agent has not registered yet: the head then refuses every
    job ("No available agent to submit job, please try again later"), for longer on a busy machine."""
    deadline = time.monotonic() + 120
    while (submitted := ray_cli("job", "submit", *args)).returncode and "No available agent" in submitted.stderr:
        assert time.monotonic() < deadline, submitted.stderr[-2000:]
        time.sleep(2)
    return submitted


def job_logs(head, job_id: str) -> str:
    """A job's log so far, from the head's job API (one HTTP request; a `ray job logs` starts a Python)."""
    token = (head.home / ".ray" / "auth_token").read_text().strip()
    request = urllib.request.Request(f"{head.job_api}/api/jobs/{job_id}/logs",
                                     headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["logs"]


def test_a_submitted_sweep_writes_to_the_absolute_results_directory(ray_cli, job_server, tmp_path):
    """The script's default real CPU engine, as a user's job runs it: a whole cell (replica start, records,
    tracking) runs in the job's temporary copy of the working directory and still lands where it was told."""
    submitted = submit(ray_cli, "--address", job_server, "--working-dir", ".", "--", "python", "sweeps/cpu_tiny.py",
                       "--policies", "fcfs", "--jps", "1", "--duration-s", "4", "--tool-time-s", "0.1",
                       "--results-dir", str(tmp_path))  # fmt: skip
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]
    assert "1/1 cells done" in submitted.stdout
    rows = pd.read_parquet(tmp_path / "cpu_tiny" / "summary.parquet")
    assert list(rows.status) == ["done"] and rows.engine[0] == "vllm" and rows.num_completed[0] == rows.num_jobs[0] > 0
    assert (tmp_path / "mlflow.db").exists() and (tmp_path / "cpu_tiny" / "cells" / rows.cell_key[0] / "requests.parquet").exists()


def test_ray_job_stop_marks_the_running_cell_interrupted_and_leaves_no_server(ray_cli, job_server, secure_ray_head,
                                                                           tmp_path):  # fmt: skip
    submitted = submit(ray_cli, "--no-wait", "--address", job_server, "--working-dir", ".", "--", "python",
                       "sweeps/cpu_tiny.py", "--engine", "fake", "--policies", "fcfs", "--jps", "1",
                       "--duration-s", "120", "--results-dir", str(tmp_path))  # fmt: skip
    job_id = re.search(r"raysubmit_\w+", submitted.stdout + submitted.stderr).group(0)
    deadline = time.monotonic() + 120
    while "jobs" not in job_logs(secure_ray_head, job_id):
        assert time.monotonic() < deadline, "the cell never started"
        time.sleep(1)
    assert ray_cli("job", "stop", "--address", job_server, job_id).returncode == 0
    logs = ray_cli("job", "logs", "--address", job_server, job_id).stdout
    assert "interrupted by signal 15" in logs
    (runs,) = runs_by_key(tmp_path, "cpu_tiny").values()
    assert [run.status.value for run in runs] == ["interrupted"]
    assert wait_until_gone() == []
