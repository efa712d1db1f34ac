"""The driver as a separate process, as ``ray job submit`` runs it: killed, stopped and re-run, on a cluster that
asks for a token as the recipes start theirs (the token in ~/.ray/auth_token, RAY_AUTH_MODE unset here); and what
happens without the token."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.paths import PROJECT_ROOT
from orchestrator.records.cell import CellStatus
from orchestrator.replica.server import free_port
from tests.clusters import SecureHead, own_ports, ray_client_env
from tests.processes import wait_until_gone
from tests.sweep.conftest import runs_by_key, summary
from tests.sweep.test_broken_environment import assert_one_line_error

SCRIPT = str(PROJECT_ROOT / "sweeps" / "cpu_tiny.py")


def start_driver(results_dir: Path, head: SecureHead, *flags: str) -> subprocess.Popen:
    """The driver joining ``head`` with RAY_AUTH_MODE unset and the token in ~/.ray/auth_token."""
    command = [sys.executable, SCRIPT, "--engine", "fake", "--results-dir", str(results_dir), "--ray-address",
               head.address, "--scale", "0.05", "--tool-time-s", "0.1", "--progress-interval-s", "600",
               "--client-actors", "0", *flags]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=head.client_env())


def read_until(process: subprocess.Popen, *markers: str, timeout_s: float = 120) -> list[str]:
    """Driver output lines up to the one containing each marker in turn."""
    lines, pending, deadline = [], list(markers), time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        line = process.stdout.readline()
        assert line, f"driver ended before {pending[0]!r}:\n{''.join(lines)}"
        lines.append(line)
        if pending[0] in line:
            pending.pop(0)
    assert not pending, f"no {pending[0]!r} within {timeout_s} s:\n{''.join(lines)}"
    return lines


def test_a_driver_killed_mid_sweep_is_finished_by_a_re_run_with_nothing_run_or_counted_twice(secure_ray_head, tmp_path):
    flags = ("--jps", "1,2", "--duration-s", "3", "--policies", "fcfs")
    driver = start_driver(tmp_path, secure_ray_head, *flags)
    read_until(driver, "done cpu fcfs jps=1", "start cpu fcfs jps=2")
    time.sleep(1.0)  # the second cell is mid-run
    driver.kill()
    driver.wait()
    before = runs_by_key(tmp_path, "cpu_tiny")
    assert sorted(run.status for runs in before.values() for run in runs) == [CellStatus.DONE, CellStatus.RUNNING]
    assert wait_until_gone() == []  # the dead driver's replica went with its worker

    rerun = start_driver(tmp_path, secure_ray_head, *flags)
    output = rerun.communicate(timeout=300)[0]
    assert rerun.returncode == 0, output
    after = runs_by_key(tmp_path, "cpu_tiny")
    assert len(after) == 2  # fcfs at two loads
    for key, runs in after.items():
        assert [run.status for run in runs].count(CellStatus.DONE) == 1, key
    (first_done,) = [run for runs in before.values() for run in runs if run.status is CellStatus.DONE]
    assert first_done in after[first_done.cell_key]  # not re-run
    (stale,) = [run for runs in before.values() for run in runs if run.status is CellStatus.RUNNING]
    assert [run.status for run in after[stale.cell_key]] == [CellStatus.INTERRUPTED, CellStatus.DONE]
    rows = summary(tmp_path, "cpu_tiny")
    assert len(rows) == 2 and rows.cell_key.is_unique and set(rows.status) == {"done"}


def test_sigterm_stops_the_sweep_marks_the_cell_interrupted_and_leaves_no_server(secure_ray_head, tmp_path):
    driver = start_driver(tmp_path, secure_ray_head, "--jps", "1", "--duration-s", "60", "--policies", "fcfs")
    read_until(driver, "start cpu fcfs jps=1")
    time.sleep(2.0)
    signalled = time.monotonic()
    driver.send_signal(signal.SIGTERM)
    output = driver.communicate(timeout=30)[0]
    stop_s = time.monotonic() - signalled
    assert driver.returncode == 128 + signal.SIGTERM, output
    assert "interrupted by signal 15; re-run the same command to finish" in output
    (runs,) = runs_by_key(tmp_path, "cpu_tiny").values()
    assert [run.status for run in runs] == [CellStatus.INTERRUPTED]
    assert set(summary(tmp_path, "cpu_tiny").status) == {"interrupted"}
    assert wait_until_gone() == []
    print(f"driver exited {stop_s:.2f} s after SIGTERM")


def test_without_the_clusters_token_the_driver_stops_within_seconds_in_one_line(secure_ray_head, tmp_path):
    empty_home = tmp_path / "home"
    empty_home.mkdir()
    started = time.monotonic()
    driver = subprocess.run([sys.executable, SCRIPT, "--engine", "fake", "--results-dir", str(tmp_path / "results"),
                             "--ray-address", secure_ray_head.address], capture_output=True, text=True, timeout=60,
                            env=secure_ray_head.client_env(empty_home))  # fmt: skip
    took_s = time.monotonic() - started
    asks = f"--ray-address {secure_ray_head.address}: the cluster asks for a Ray auth token"
    assert_one_line_error(driver, f"{asks} and none was found")
    assert f"{empty_home}/.ray/auth_token" in driver.stderr and "ray get-auth-token" in driver.stderr
    assert not (tmp_path / "results" / "mlflow.db").exists()
    assert took_s < 30, f"took {took_s:.1f} s"  # Ray itself retries for about a minute before it gives up
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token")
    refused = subprocess.run([sys.executable, SCRIPT, "--engine", "fake", "--dry-run", "--results-dir", str(tmp_path),
                              "--ray-address", secure_ray_head.address], capture_output=True, text=True, timeout=60,
                             env=secure_ray_head.client_env(empty_home) | {"RAY_AUTH_TOKEN_PATH": str(wrong)})  # fmt: skip
    assert_one_line_error(refused, f"refused the one in RAY_AUTH_TOKEN_PATH ({wrong})")


def test_the_job_api_refuses_a_submission_without_the_token_and_answers_with_it(secure_ray_head, tmp_path):
    ray_cli = str(Path(sys.executable).parent / "ray")
    submit = [ray_cli, "job", "submit", "--address", secure_ray_head.job_api, "--", "python", "-c", "pass"]
    without_token = secure_ray_head.client_env(tmp_path)
    refused = subprocess.run(submit, capture_output=True, text=True, timeout=60, env=without_token)
    assert refused.returncode != 0 and "Unauthorized" in refused.stdout + refused.stderr
    with_token = secure_ray_head.client_env() | {"RAY_AUTH_MODE": "token"}
    listed = subprocess.run([ray_cli, "job", "list", "--address", secure_ray_head.job_api], capture_output=True,
                            text=True, timeout=60, env=with_token)  # fmt: skip
    assert listed.returncode == 0, listed.stderr


def doctor_auth_rows(address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "orchestrator.cli.doctor", "--ray-address", address, "--auth-only"]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=PROJECT_ROOT)


def test_the_doctor_passes_a_head_that_asks_every_caller_for_the_token(secure_ray_head):
    doctor = doctor_auth_rows(secure_ray_head.address, secure_ray_head.client_env())
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert re.search(r"^node \S+ \(head\)\s+authentication\s+ok\s+token$", doctor.stdout, re.M), doctor.stdout
    assert re.search(r"^cluster\s+job API\s+ok\s+\S+:\d+ refuses requests without the token$", doctor.stdout, re.M)


def test_the_doctor_fails_a_head_whose_job_api_runs_jobs_for_anyone_beyond_loopback(tmp_path):
    """A head of its own: the doctor must meet a job API open beyond loopback that asks no token, which neither
    the shared cluster (no dashboard) nor the token head is."""
    from ray.cluster_utils import Cluster

    # This test process, and so this head, runs with RAY_AUTH_MODE=disabled (tests/conftest.py).
    dashboard = {"include_dashboard": True, "dashboard_host": "0.0.0.0", "dashboard_port": free_port(), **own_ports()}
    open_head = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, **dashboard})
    try:
        doctor = doctor_auth_rows(open_head.address, ray_client_env(tmp_path))
    finally:
        open_head.shutdown()
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert re.search(r"^node \S+ \(head\)\s+authentication\s+ok\s+disabled: ", doctor.stdout, re.M), doctor.stdout
    (row,) = [line for line in doctor.stdout.splitlines() if line.startswith("cluster")]
    assert "FAIL" in row and "runs jobs for anyone who reaches it (no token asked)" in row
    assert "doctor: 1 failed" in doctor.stdout
