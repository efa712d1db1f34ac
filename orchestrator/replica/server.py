"""An inference server as a child process: started in its own process group, health-checked, torn down whole.

vLLM forks an engine-core process and workers; killing only the API server would leave them holding memory.
The server therefore runs as the leader of a new session, teardown signals the whole group (SIGTERM, then
SIGKILL after a grace period), and a reaper process (``replica.reaper``) kills the group if the process that
started it dies first, so no server outlives a crashed driver or actor.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.paths import PROJECT_ROOT


@dataclass(frozen=True)
class ServerCommand:
    """Everything needed to start the server: argv, extra environment, and where it listens."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8000

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


class ServerStartError(RuntimeError):
    """The server exited or did not become healthy before its deadline; the message ends with its log tail."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


class ServerProcess:
    """Owns one server process group. Use as a context manager, or call ``start``/``stop``."""

    def __init__(self, command: ServerCommand, log_path: Path):
        self.command = command
        self.log_path = Path(log_path)
        self._process: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self, health_timeout_s: float = 300.0) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                self.command.argv,
                env={**os.environ, **self.command.env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        subprocess.run(
            [sys.executable, "-m", "orchestrator.replica.reaper", "--group", str(self._process.pid), "--owner", str(os.getpid())],
            env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")},
            stdin=subprocess.DEVNULL,
            check=True,
        )
        try:
            self._wait_healthy(health_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        url = self.command.base_url + "/health"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ServerStartError(f"server exited with code {self._process.returncode}\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        raise ServerStartError(f"server not healthy at {url} after {timeout_s:.0f} s\n{self.log_tail()}")

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def exit_code(self) -> int | None:
        return self._process.poll() if self._process else None

    def stop(self, grace_s: float = 10.0) -> None:
        """Signal the whole process group, wait, then SIGKILL whatever is left of it."""
        if self._process is None:
            return
        group = self._process.pid
        _signal_group(group, signal.SIGTERM)
        try:
            self._process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        # Children may outlive the leader; the group id still names them.
        _signal_group(group, signal.SIGKILL)
        self._process.wait()
        _wait_group_gone(group, timeout_s=grace_s)
        self._process = None

    def log_tail(self, num_lines: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(lines[-num_lines:])

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        pass


def group_members(group: int) -> list[int]:
    """Live (non-zombie) pids whose process group is ``group``, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state is the first, pgrp the third.
        after_name = stat.rsplit(")", 1)[1].split()
        if int(after_name[2]) == group and after_name[0] != "Z":
            members.append(int(entry.name))
    return members


def _wait_group_gone(group: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while group_members(group) and time.monotonic() < deadline:
        time.sleep(0.1)
