"""One replica: an engine server for a sequence of cells, with a proven-clean reset between them.

A plain class; the sweep's cell worker owns one on a node with the cell's GPU type. The engine is any
configuration of ``replica.config``: real vLLM (its command line from ``vllm_server``) or the fake engine. Given a
launcher (``replica.launcher``), a vLLM server forks from it, its engine core and worker from the server, so that
none imports vLLM anew: on the CPU a start of the tiny model takes seconds instead of half a minute.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from orchestrator.records.cell import EngineFacts, ResetProof
from orchestrator.records.layout import PLUGIN_TRACE_FILE, SERVER_LOG_FILE
from orchestrator.replica.config import EngineConfig, FakeEngineConfig, VllmEngineConfig
from orchestrator.replica.fake_engine import fake_server_command
from orchestrator.replica.probe import (
    EXTERNAL_HITS,
    cached_tokens_of,
    canary_prompt,
    read_counters,
    read_engine_facts,
)
from orchestrator.replica.launcher import LauncherClient, vllm_preload
from orchestrator.replica.priority import niceness
from orchestrator.replica.server import ServerCommand, ServerProcess, StartLimits, free_port
from orchestrator.replica.vllm_server import vllm_server_command

FINISH_EVENT = b'"kind":"finish"'


class ResetError(RuntimeError):
    """The caches could not be reset, or the reset could not be proven; the replica must be restarted instead."""


@dataclass(frozen=True)
class OutputMark:
    """Sizes of the server log and scheduler trace at a moment, to cut out one cell's share of them."""

    log_bytes: int
    trace_bytes: int


@dataclass(frozen=True)
class ReplicaInfo:
    base_url: str
    facts: EngineFacts
    server_argv: tuple[str, ...]
    server_env: dict[str, str]
    server_niceness: int  # what the server's process ran at (``replica.priority``)
    log_path: str
    trace_path: str


class Replica:
    def __init__(self, engine: EngineConfig, work_dir: str | Path, start_limits: StartLimits = StartLimits(),
                 launcher: LauncherClient | None = None):  # fmt: skip
        self._engine = engine
        self._work_dir = Path(work_dir).absolute()
        self._start_limits = start_limits
        self._launcher = launcher if forks_from_launcher(engine) else None
        self._server: ServerProcess | None = None
        self._info: ReplicaInfo | None = None

    def start(self) -> ReplicaInfo:
        self._work_dir.mkdir(parents=True, exist_ok=True)
        trace_path = self._work_dir / PLUGIN_TRACE_FILE
        command = server_command(self._engine, port=free_port(), trace_path=trace_path)
        if self._launcher is not None:
            command = command.forked()
        self._server = ServerProcess(command, self._work_dir / SERVER_LOG_FILE, self._launcher)
        self._server.start(self._start_limits)
        self._info = ReplicaInfo(
            base_url=command.base_url,
            facts=read_engine_facts(command.base_url),
            server_argv=command.argv,
            server_env=command.env,
            server_niceness=niceness(self._server.pid),
            log_path=str(self._server.log_path),
            trace_path=str(trace_path),
        )
        return self._info

    @property
    def info(self) -> ReplicaInfo | None:
        return self._info

    @property
    def forked(self) -> bool:
        """Whether its server forked from a launcher."""
        return self._launcher is not None

    @property
    def engine(self) -> EngineConfig:
        return self._engine

    def is_alive(self) -> bool:
        return self._server is not None and self._server.is_running()

    @property
    def exit_code(self) -> int | None:
        return self._server.exit_code if self._server else None

    def mark(self) -> OutputMark:
        return OutputMark(_size(self._work_dir / SERVER_LOG_FILE), _size(self._work_dir / PLUGIN_TRACE_FILE))

    def output_since(self, mark: OutputMark, num_requests: int = 0, settle_s: float = 5.0) -> tuple[str, bytes]:
        """The server log text and scheduler trace bytes written since ``mark``.

        A client's timeout reaches the engine as an abort a moment after the client gave up, so the trace
        is re-read until it has a ``finish`` event for each of the ``num_requests`` the cell sent, for at
        most ``settle_s`` (a request that never reached the engine has none). An engine that writes no
        trace is not waited for.
        """
        trace_path = self._work_dir / PLUGIN_TRACE_FILE
        trace = _read_from(trace_path, mark.trace_bytes)
        deadline = time.monotonic() + settle_s
        while trace_path.exists() and trace.count(FINISH_EVENT) < num_requests and time.monotonic() < deadline:
            time.sleep(0.05)
            trace = _read_from(trace_path, mark.trace_bytes)
        log = _read_from(self._work_dir / SERVER_LOG_FILE, mark.log_bytes).decode(errors="replace")
        return log, trace

    def reset(self) -> ResetProof:
        """Empty the prefix cache and any CPU tier, and prove it rather than trust the server's word: a
        canary prompt is cached (sent twice: the second send must hit), the caches are reset, and the
        canary sent again must get 0 cached tokens and no external-cache hit. vLLM's LMCache connector, for
        one, answers a reset with success and keeps its CPU tier. A last reset drops the canary itself.

        Raises ``ResetError`` when the reset fails or the proof does: reusing the replica would then leak
        cache hits from one cell into the next.
        """
        url, model, canary = self._info.base_url, self._engine.served_model_name, canary_prompt()
        cached_tokens_of(url, model, canary)
        cached_before = cached_tokens_of(url, model, canary)
        if cached_before == 0:
            raise ResetError("a canary prompt sent twice was not cached, so no reset of this engine can be proven")
        self._request_reset()
        hits_before = (read_counters(url) or {}).get(EXTERNAL_HITS, 0.0)
        cached_after = cached_tokens_of(url, model, canary)
        external_hits = (read_counters(url) or {}).get(EXTERNAL_HITS, 0.0) - hits_before
        proof = ResetProof(cached_before, cached_after, external_hits)
        if not proof.clean:
            raise ResetError(
                f"the engine reported its caches reset, but a canary prompt cached before the reset came back with "
                f"{cached_after} cached tokens and {external_hits:g} external-cache hits"
            )
        self._request_reset()
        return proof

    def _request_reset(self, attempts: int = 20, wait_s: float = 0.5) -> None:
        """POST the reset until the server says it succeeded; it fails while blocks are held."""
        url = f"{self._info.base_url}/reset_prefix_cache?reset_external=true"
        for _ in range(attempts):
            try:
                request = urllib.request.Request(url, method="POST", data=b"")
                with urllib.request.urlopen(request, timeout=30) as response:
                    if json.loads(response.read() or b"{}").get("success") is True:
                        return
            except (urllib.error.URLError, json.JSONDecodeError):
                pass
            time.sleep(wait_s)
        raise ResetError(f"prefix cache reset at {url} did not succeed after {attempts} attempts")

    def log_tail(self, num_lines: int = 40) -> str:
        return self._server.log_tail(num_lines) if self._server else ""

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


def forks_from_launcher(engine: EngineConfig) -> bool:
    """Whether a replica of ``engine`` starts from a launcher where it is given one: vLLM, on the CPU or a GPU. The
    launcher touches no accelerator (it checks), so a forked GPU server meets CUDA first, as vLLM's own engine core
    forked from its API server does; the cell worker still starts one plainly if a forked one exits."""
    return isinstance(engine, VllmEngineConfig)


def forking_proven(engine: EngineConfig) -> bool:
    """Whether forked starts of ``engine`` are proven: on the CPU every vLLM cell of this project has started so. On a
    GPU no run had yet when the launcher came to GPUs, so a forked GPU start that exits is tried again plainly."""
    return isinstance(engine, VllmEngineConfig) and engine.device == "cpu"


def launcher_preload(engine: VllmEngineConfig) -> tuple[str, ...]:
    """What the launcher a replica of ``engine`` forks from imports beforehand."""
    return vllm_preload(engine.device)


def server_command(engine: EngineConfig, port: int, trace_path: Path | None = None) -> ServerCommand:
    """The command that serves ``engine`` on ``port``; ``trace_path`` receives vLLM's scheduler trace."""
    if isinstance(engine, FakeEngineConfig):
        return fake_server_command(engine, port)
    return vllm_server_command(engine, port, trace_path=trace_path)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read()
    except FileNotFoundError:
        return b""
