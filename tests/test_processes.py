"""The test helpers that find a replica's processes, against processes started here."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.replica.replica import SERVER_LOG_FILE
from tests.processes import processes_matching, replica_processes, with_descendants


def retitled(title: str) -> list[str]:
    """A process that runs code from this environment (a compiled module of its site-packages) and retitles
    itself the way vLLM's engine process does, which replaces its command line and blanks its environment."""
    script = f"import setproctitle, time; setproctitle.setproctitle({title!r}); time.sleep(60)"
    return [sys.executable, "-c", script]


@pytest.fixture
def start(tmp_path):
    started: list[subprocess.Popen] = []

    def start(argv: list[str], log_name: str) -> int:
        with open(tmp_path / log_name, "wb") as log:
            started.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
        return started[-1].pid

    yield start
    for process in started:
        process.kill()
        process.wait()


def _wait_for_title(pid: int, title: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (pid, title) not in processes_matching(title.lower()):
        assert time.monotonic() < deadline, f"process {pid} never took the title {title!r}"
        time.sleep(0.05)


def test_a_retitled_engine_process_writing_a_server_log_is_a_replicas_even_once_the_log_is_deleted(start, tmp_path):
    pid = start(retitled("VLLM::EngineCore"), SERVER_LOG_FILE)
    _wait_for_title(pid, "VLLM::EngineCore")
    assert pid in {found for found, _ in replica_processes()}
    (tmp_path / SERVER_LOG_FILE).unlink()  # a worker removes its directory when it stops
    assert pid in {found for found, _ in replica_processes()}


def test_a_process_naming_vllm_that_writes_no_server_log_is_not_a_replicas(start):
    # It runs code from this environment too: only its output tells it apart.
    pid = start(retitled("pip install vllm"), "pip.log")
    _wait_for_title(pid, "pip install vllm")
    assert pid in {found for found, _ in processes_matching("vllm")}
    assert pid not in {found for found, _ in replica_processes()}


def test_a_server_log_written_from_another_environment_is_not_this_checkouts(start):
    sleep = Path(shutil.which("sleep")).resolve()
    pid = start([str(sleep), "60"], SERVER_LOG_FILE)
    assert pid not in {found for found, _ in replica_processes()}
    assert pid in {found for found, _ in replica_processes(prefix=str(sleep.parent))}


def test_descendants_are_found_through_every_generation(start):
    shell = start(["/bin/sh", "-c", "sleep 60 & wait"], "shell.log")
    deadline = time.monotonic() + 10
    while len(with_descendants({shell})) < 2:
        assert time.monotonic() < deadline, "the shell's sleep never appeared"
        time.sleep(0.05)
    (child,) = with_descendants({shell}) - {shell}
    assert "sleep" in Path(f"/proc/{child}/cmdline").read_text()
    assert with_descendants(set()) == set()
