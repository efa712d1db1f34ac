"""Finding server processes on this machine, to prove none is left behind.

Another test process may run beside this one (``make test`` runs two), with servers of its own started from
the same environment. A replica's processes are told apart by where they write: every server a replica starts
(and every child of it) writes the replica's server log, and everything this test process starts (its Ray
clusters, their workers, drivers, replicas) makes its files under this process's test root (``TEST_ROOT_ENV``,
set by ``tests/conftest.py``)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.replica.replica import SERVER_LOG_FILE

# Names the directory under which this test process and everything it starts keep their files.
TEST_ROOT_ENV = "KVSWEEP_TEST_ROOT"
FAKE_ENGINE_MODULE = "orchestrator.replica.fake_engine"
VLLM_API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


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


def test_root() -> Path | None:
    """The directory under which this test process and what it starts write, if the suite set one."""
    root = os.environ.get(TEST_ROOT_ENV)
    return Path(root) if root else None


def replica_processes(prefix: str = sys.prefix, under: Path | None = None) -> list[tuple[int, str]]:
    """(pid, command line) of every live process of a server a replica started from the environment at
    ``prefix`` (this checkout's by default) with its log under ``under`` (this test process's root by
    default, anywhere where there is none), the server's children included: each writes the replica's server
    log and runs code from that environment. Not the command line: vLLM retitles its engine process
    ``VLLM::EngineCore`` (blanking its environment in /proc too), and a ``pip install vllm`` names vllm."""
    environment = f"{Path(prefix).resolve()}/"
    root = under or test_root()
    found = []
    for pid, entry, cmdline in _live_processes():
        try:
            output = Path(os.readlink(entry / "fd" / "1").removesuffix(" (deleted)"))
            runs_here = output.name == SERVER_LOG_FILE and environment in (entry / "maps").read_text()
        except OSError:  # gone, or another user's
            continue
        if runs_here and (root is None or output.is_relative_to(root)):
            found.append((pid, cmdline))
    return found


def fake_engine_processes() -> list[tuple[int, str]]:
    """This test process's fake engines (``replica_processes`` running the fake engine)."""
    return [(pid, cmdline) for pid, cmdline in replica_processes() if FAKE_ENGINE_MODULE in cmdline]


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


def kill_processes_naming(text: str) -> None:
    """SIGKILL every process whose command line names ``text`` (a cluster's temp dir), and their descendants
    (the workers of a Ray node, retitled ``ray::...``, name it only through their parents)."""
    for pid in with_descendants({pid for pid, _ in processes_matching(text)}):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_until_gone(find=fake_engine_processes, timeout_s: float = 15.0) -> list[tuple[int, str]]:
    """What ``find`` still finds after up to ``timeout_s`` (empty when it all went)."""
    deadline = time.monotonic() + timeout_s
    while (left := find()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def wait_for_serving(
    exclude: set[int],
    server_module: str,
    served: Callable[[dict[str, float]], bool],
    timeout_s: float = 300.0,
    ended: Callable[[], str | None] = lambda: None,
) -> int:
    """The pid of this test process's first server of ``server_module`` not in ``exclude`` once its counters
    show ``served``, i.e. a cell is mid-run. ``ended`` says how the work that was to start the server ended, if
    it has: waiting on then would only time out, without saying why."""
    import re

    from orchestrator.replica.probe import read_counters

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (how := ended()) is not None:
            raise RuntimeError(f"no {server_module} server was mid-cell: {how}")
        for pid, cmdline in replica_processes():
            port = re.search(r"--port (\d+)", cmdline)
            if pid in exclude or server_module not in cmdline or not port:
                continue
            counters = read_counters(f"http://127.0.0.1:{port.group(1)}")
            if counters and served(counters):
                return pid
        time.sleep(0.5)
    raise TimeoutError(f"no {server_module} server was mid-cell within {timeout_s:g} s")


def wait_for_serving_vllm(
    exclude: set[int], min_requests: int, timeout_s: float = 300.0, ended: Callable[[], str | None] = lambda: None
) -> int:
    """The pid of this test process's first vLLM API server not in ``exclude`` once it has answered
    ``min_requests`` requests (``ended`` as for ``wait_for_serving``)."""
    return wait_for_serving(
        exclude,
        VLLM_API_SERVER_MODULE,
        lambda counters: counters.get("vllm:request_success_total", 0) >= min_requests,
        timeout_s,
        ended,
    )
