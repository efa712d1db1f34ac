"""An inference server as a child process: started in its own process group, health-checked, torn down whole.

vLLM forks an engine-core process and workers; killing only the API server would leave them holding memory.
The server therefore runs as the leader of a new session, teardown signals the whole group (SIGTERM, then
SIGKILL after a grace period), and a reaper process (``replica.reaper``) kills the group if the process that
started it dies first, so no server outlives a crashed driver or actor.

The process is started by ``subprocess.Popen``, or forked by a launcher that has imported the server's modules once
(``replica.launcher``), which starts it in the same state: its own session, its log, exactly its environment.

A start may be slow (a cold compile cache, weights on a slow shared filesystem) or hung (a deadlock, a peer that
never comes): while it starts, the group's log, CPU time and I/O are watched, and a start that shows none of
them change for ``StartLimits.stall_s`` is ended as hung, long before a generous ``timeout_s`` would end it.
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
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator.paths import with_project_on_path
from orchestrator.replica.launcher import FORKED_VLLM_ENV, LaunchedProcess, LauncherClient


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

    def forked(self) -> ServerCommand:
        """The command as a launcher's child runs it: a vLLM server's engine core and workers fork from it in turn."""
        return replace(self, env={**self.env, **FORKED_VLLM_ENV})


class ServerStartError(RuntimeError):
    """The server exited, hung, or did not become healthy before its deadline; the message ends with its log tail."""


@dataclass(frozen=True)
class StartLimits:
    """How long a server may take to become healthy, and how long it may show no sign of life meanwhile (no log
    output, no CPU time, no I/O in its whole process group)."""

    timeout_s: float = 300.0
    stall_s: float = 300.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


class ServerProcess:
    """Owns one server process group. Use as a context manager, or call ``start``/``stop``."""

    def __init__(self, command: ServerCommand, log_path: Path, launcher: LauncherClient | None = None):
        self.command = command
        self.log_path = Path(log_path)
        self._launcher = launcher
        self._process: subprocess.Popen | LaunchedProcess | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self, limits: StartLimits = StartLimits()) -> None:
        """Launch the server and wait until it is healthy (``ServerStartError`` otherwise, the group stopped)."""
        self.launch()
        try:
            self._wait_healthy(limits)
        except BaseException:
            self.stop()
            raise

    def launch(self) -> None:
        """Start the server's process group and its reaper, without waiting for it."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._process = self._launch()
        subprocess.run(
            [sys.executable, "-m", "orchestrator.replica.reaper", "--group", str(self._process.pid), "--owner", str(os.getpid())],
            env=with_project_on_path(os.environ),
            stdin=subprocess.DEVNULL,
            check=True,
        )

    def _launch(self) -> subprocess.Popen | LaunchedProcess:
        env = {**os.environ, **self.command.env}
        if self._launcher is not None:
            return self._launcher.spawn(self.command.argv, env, self.log_path)
        with open(self.log_path, "ab") as log:
            return subprocess.Popen(self.command.argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

    def _wait_healthy(self, limits: StartLimits) -> None:
        started = time.monotonic()
        deadline = started + limits.timeout_s
        url = self.command.base_url + "/health"
        sign_of_life, last_change = None, started
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ServerStartError(f"server exited with code {self._process.returncode}\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            now = time.monotonic()
            if (signs := (self._log_size(), group_activity(self._process.pid))) != sign_of_life:
                sign_of_life, last_change = signs, now
            elif now - last_change > limits.stall_s:
                raise ServerStartError(f"server hung while starting: no log output, CPU time or I/O for "
                                       f"{limits.stall_s:g} s ({now - started:.0f} s after its start)\n{self.log_tail()}")  # fmt: skip
            time.sleep(0.5)
        raise ServerStartError(f"server not healthy at {url} after {limits.timeout_s:.0f} s\n{self.log_tail()}")

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

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


def group_activity(group: int) -> tuple[int, int]:
    """The CPU ticks and the bytes read and written so far by the live processes of ``group`` (from /proc): a
    start that waits on nothing but itself moves neither."""
    ticks = io_bytes = 0
    for pid in group_members(group):
        try:
            after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(after_name[11]) + int(after_name[12])  # utime, stime
            counters = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
            io_bytes += int(counters["rchar"]) + int(counters["wchar"])
        except (OSError, KeyError, ValueError):
            continue  # it exited meanwhile
    return ticks, io_bytes


def _wait_group_gone(group: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while group_members(group) and time.monotonic() < deadline:
        time.sleep(0.1)
