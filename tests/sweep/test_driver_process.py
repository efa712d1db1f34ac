"""The driver as a separate process, as ``ray job submit`` runs it: killed, stopped and re-run."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.paths import PROJECT_ROOT
from orchestrator.records.cell import CellStatus
from tests.processes import FAKE_ENGINE, wait_until_gone
from tests.sweep.conftest import runs_by_key, summary

SCRIPT = str(PROJECT_ROOT / "sweeps" / "cpu_tiny.py")


def start_driver(results_dir: Path, address: str, *flags: str) -> subprocess.Popen:
    command = [sys.executable, SCRIPT, "--engine", "fake", "--results-dir", str(results_dir), "--ray-address", address,
               "--scale", "0.05", "--tool-time-s", "0.1", "--progress-interval-s", "600", *flags]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


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


def test_a_driver_killed_mid_sweep_is_finished_by_a_re_run_with_nothing_run_or_counted_twice(ray_head, tmp_path):
    flags = ("--jps", "1,2,3", "--duration-s", "3")
    driver = start_driver(tmp_path, ray_head, *flags)
    read_until(driver, "done cpu fcfs jps=1", "start cpu fcfs jps=2")
    time.sleep(1.0)  # the second cell is mid-run
    driver.kill()
    driver.wait()
    before = runs_by_key(tmp_path, "cpu_tiny")
    assert sorted(run.status for runs in before.values() for run in runs) == [CellStatus.DONE, CellStatus.RUNNING]
    assert wait_until_gone(FAKE_ENGINE) == []  # the dead driver's replica went with its worker

    rerun = start_driver(tmp_path, ray_head, *flags)
    output = rerun.communicate(timeout=300)[0]
    assert rerun.returncode == 0, output
    after = runs_by_key(tmp_path, "cpu_tiny")
    assert len(after) == 6  # fcfs and continuum at three loads
    for key, runs in after.items():
        assert [run.status for run in runs].count(CellStatus.DONE) == 1, key
    (first_done,) = [run for runs in before.values() for run in runs if run.status is CellStatus.DONE]
    assert first_done in after[first_done.cell_key]  # not re-run
    (stale,) = [run for runs in before.values() for run in runs if run.status is CellStatus.RUNNING]
    assert [run.status for run in after[stale.cell_key]] == [CellStatus.INTERRUPTED, CellStatus.DONE]
    rows = summary(tmp_path, "cpu_tiny")
    assert len(rows) == 6 and rows.cell_key.is_unique and set(rows.status) == {"done"}


def test_sigterm_stops_the_sweep_marks_the_cell_interrupted_and_leaves_no_server(ray_head, tmp_path):
    driver = start_driver(tmp_path, ray_head, "--jps", "1", "--duration-s", "60", "--policies", "fcfs")
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
    assert wait_until_gone(FAKE_ENGINE) == []
    print(f"driver exited {stop_s:.2f} s after SIGTERM")
