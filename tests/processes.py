"""Finding server processes on this machine, to prove none is left behind."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from orchestrator.replica.replica import SERVER_LOG_FILE

# The fake engine as started from this checkout's environment (another checkout's tests may run beside).
FAKE_ENGINE = f"{Path(sys.executable).parent}/python -m orchestrator.replica.fake_engine".lower()


def _live_processes():
    """(pid, its /proc directory, command line) of every live process other than this one."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            yield int(entry.name), entry, cmdline.strip()


def processes_matching(text: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process other than this one whose command line contains ``text``."""
    return [(pid, cmdline) for pid, _, cmdline in _live_processes() if text in cmdline.lower()]


def replica_processes(prefix: str = sys.prefix) -> list[tuple[int, str]]:
    """(pid, command line) of every live process of a server a replica started from the environment at
    ``prefix`` (this checkout's by default), the server's children included: each writes the replica's
    server log and runs code from that environment. Not the command line: vLLM retitles its engine process
    ``VLLM::EngineCore`` (blanking its environment in /proc too), and a ``pip install vllm`` names vllm."""
    environment = f"{Path(prefix).resolve()}/"
    found = []
    for pid, entry, cmdline in _live_processes():
        try:
            output = os.readlink(entry / "fd" / "1").removesuffix(" (deleted)")
            runs_here = Path(output).name == SERVER_LOG_FILE and environment in (entry / "maps").read_text()
        except OSError:  # gone, or another user's
            continue
        if runs_here:
            found.append((pid, cmdline))
    return found


def with_descendants(pids: set[int]) -> set[int]:
    """``pids`` and every live process below them (children, their children, ...)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError):
            continue
    found = set(pids)
    while grown := {pid for pid, parent in parents.items() if parent in found and pid not in found}:
        found |= grown
    return found


def vllm_processes() -> list[tuple[int, str]]:
    return processes_matching("vllm")


def wait_until_gone(text: str, timeout_s: float = 15.0) -> list[tuple[int, str]]:
    """Processes still matching ``text`` after up to ``timeout_s`` (empty when they all went)."""
    deadline = time.monotonic() + timeout_s
    while (left := processes_matching(text)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def wait_for_serving_vllm(exclude: set[int], min_requests: int, timeout_s: float = 300.0) -> int:
    """The pid of the first vLLM API server not in ``exclude`` once it has answered ``min_requests``
    requests, i.e. a cell is mid-run."""
    import re

    from orchestrator.replica.probe import read_counters

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid, cmdline in processes_matching("vllm.entrypoints.openai.api_server"):
            port = re.search(r"--port (\d+)", cmdline)
            if pid in exclude or not port:
                continue
            counters = read_counters(f"http://127.0.0.1:{port.group(1)}")
            if counters and counters.get("vllm:request_success_total", 0) >= min_requests:
                return pid
        time.sleep(0.5)
    raise TimeoutError(f"no vLLM server answered {min_requests} requests within {timeout_s:g} s")
