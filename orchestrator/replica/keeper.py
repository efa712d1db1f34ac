"""How a cell worker keeps its replica: one replica at a time, reused by the next cell of the same server
configuration only after a reset proven to have emptied every cache tier (``Replica.reset``), else replaced, with the
reason; started by forking from the node's launcher where it may (``replica.launcher``), and plainly where the
launcher refused or a forked start failed where forking is not proven (a GPU), each start recorded with how it went.
It also reads the node's serving stack, once, through the same launcher."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.inputs.validation import first_line
from orchestrator.records.cell import NodeStack, ReplicaStart, ResetProof
from orchestrator.replica.config import EngineConfig
from orchestrator.replica.launcher import LauncherClient, LauncherError, LauncherRefused, start_launcher
from orchestrator.replica.replica import Replica, ResetError, forking_proven, forks_from_launcher, launcher_preload
from orchestrator.replica.server import ServerStartError, StartLimits
from orchestrator.replica.stack import read_node_stack
from orchestrator.replica.start_phases import start_split
from orchestrator.replica.vllm_server import shared_environment


@dataclass(frozen=True)
class ReplicaReuse:
    """How a cell got its replica: reused after a proven reset, or started (in ``start_s``), and why the
    previous replica was not reused when it could have been."""

    reused: bool
    proof: ResetProof | None = None
    start_s: float | None = None
    replaced_because: str | None = None
    start: ReplicaStart | None = None  # a real vLLM start's record


class StartFailed(Exception):
    """A replica that did not start: why, in one line, and its server's last log lines (``log``)."""

    def __init__(self, reason: str, log: str):
        super().__init__(reason)
        self.log = log


class ReplicaKeeper:
    """The replica a worker runs now (``replica``), the launcher its replicas fork from, and the node's stack.
    ``resetting`` is called as a kept replica's reset begins, so that the worker can say so."""

    def __init__(self, resetting: Callable[[], None] = lambda: None):
        self.work_dir = Path(tempfile.mkdtemp(prefix="kvsweep-worker-"))
        self.replica: Replica | None = None
        self.replicas_started = 0
        self.launcher: tuple[subprocess.Popen, LauncherClient] | None = None  # started by the first replica forked
        self._resetting = resetting
        self._plain_because: str | None = None  # why this worker starts vLLM without its launcher, once it must
        self._fork_retried = False  # a failed forked start was tried again plainly (once per worker)
        self._stack: NodeStack | None = None  # read once, when the first real vLLM cell comes

    def ensure(self, engine: EngineConfig, start_limits: StartLimits) -> ReplicaReuse:
        """A running replica of ``engine`` whose caches are empty: the previous one after a proven reset, else
        a fresh one (with the reason the previous one was not kept, when there was one to keep). Raises
        ``StartFailed`` where it did not start: the failed replica is dropped, and a launcher that failed ended, so
        that the next start begins with one of its own."""
        try:
            return self._ensure(engine, start_limits)
        except (ServerStartError, LauncherError) as error:
            log = self.log_tail(200)
            self.drop()
            if isinstance(error, LauncherError):
                self._stop_launcher()
            raise StartFailed(first_line(error), log) from None

    def _ensure(self, engine: EngineConfig, start_limits: StartLimits) -> ReplicaReuse:
        current, replaced_because = self.running(), None
        if current is not None and current.engine == engine:
            self._resetting()
            try:
                return ReplicaReuse(reused=True, proof=current.reset())
            except (ResetError, OSError) as error:  # a cache not proven empty would leak hits into this cell
                replaced_because = f"reset not proven clean: {first_line(error)}"
        self.drop()
        started = time.monotonic()  # a launcher's own start, the first time, is part of this start
        launcher = self._launcher_for(engine)
        serving_since = started
        try:
            self._start(engine, start_limits, launcher)
        except ServerStartError as failed:
            if launcher is None or forking_proven(engine) or self._fork_retried:
                raise
            # Where forked starts are not proven (a GPU), the first that fails is tried again as a process of its
            # own: where that serves, this worker forks no more; where it fails too, the fork was not to blame.
            self._fork_retried = True
            serving_since = time.monotonic()
            self._start(engine, start_limits, None)
            self._plain_because = f"a forked start failed: {_start_failure(failed)}"
            self._stop_launcher()  # it would hold its imports' host memory for nothing
        now = time.monotonic()
        return ReplicaReuse(reused=False, start_s=now - started, replaced_because=replaced_because,
                            start=self._start_record(engine, now - serving_since))  # fmt: skip

    def running(self) -> Replica | None:
        """The replica this worker keeps, if its server is still running."""
        return self.replica if self.replica is not None and self.replica.is_alive() else None

    def prove_reset(self) -> ResetProof:
        """Reset the current replica and prove it clean, as the next cell would (the doctor's check).
        Raises ``ResetError`` when the proof fails."""
        if (replica := self.running()) is None:
            raise ResetError("no replica is running to reset")
        return replica.reset()

    def log(self) -> str:
        """The whole server log of the replica now running, its start at the top ('' when none runs)."""
        info = self.replica.info if self.replica is not None else None
        return Path(info.log_path).read_text(errors="replace") if info is not None else ""

    def log_tail(self, lines: int) -> str:
        return self.replica.log_tail(lines) if self.replica is not None else ""

    def node_stack(self, engine: EngineConfig, via_launcher: bool) -> NodeStack:
        """Read once: ``via_launcher``, by a child of the launcher this worker's replicas fork from (started here if
        it is not yet), else by a fresh interpreter; also where the launcher did not answer, which the replica's
        start then meets and says."""
        if self._stack is None:
            try:
                launcher = self._launcher_for(engine) if via_launcher else None
                self._stack = read_node_stack(launcher=launcher, work_dir=self.work_dir)
            except LauncherError:
                self._stack = read_node_stack()
        return self._stack

    def drop(self) -> None:
        if self.replica is not None:
            self.replica.stop()
            self.replica = None

    def shutdown(self) -> None:
        self.drop()
        self._stop_launcher()
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def _start(self, engine: EngineConfig, start_limits: StartLimits, launcher: LauncherClient | None) -> None:
        self.replicas_started += 1
        self.replica = Replica(engine, self.work_dir / f"replica-{self.replicas_started}", start_limits, launcher)
        self.replica.start()

    def _start_record(self, engine: EngineConfig, start_s: float) -> ReplicaStart | None:
        """What the start of the replica now running found and spent in ``start_s`` (real vLLM; the fake engine
        logs nothing of it); a failed forked start before it is in the cell's ``replica_start_s`` only."""
        if not forks_from_launcher(engine):
            return None
        split = start_split(self.log(), start_s)
        forked = self.replica.forked
        return ReplicaStart(forked=forked, plain_because=None if forked else self._plain_because,
                            compile_cache=split.compile_cache, phases=split.phases())  # fmt: skip

    def _launcher_for(self, engine: EngineConfig) -> LauncherClient | None:
        """The node's launcher for a replica of ``engine`` that forks from one (``replica.forks_from_launcher``):
        started at the first such replica, with the environment every server shares, and again if it died. None
        where the replica does not fork, or this worker found it cannot (``_plain_because``)."""
        if not forks_from_launcher(engine) or self._plain_because is not None:
            return None
        if self.launcher is None or self.launcher[0].poll() is not None:
            try:
                self.launcher = start_launcher(self.work_dir / "launcher.sock", launcher_preload(engine),
                                               {**os.environ, **shared_environment()})  # fmt: skip
            except LauncherRefused as refusal:  # it would refuse again: this worker's starts are plain from now
                self._plain_because = f"the launcher refused: {first_line(refusal)}"
                return None
        return self.launcher[1]

    def _stop_launcher(self, grace_s: float = 10.0) -> None:
        """The launcher exits when its stdin closes; one that does not within ``grace_s`` is killed."""
        if self.launcher is None:
            return
        process, _ = self.launcher
        self.launcher = None
        process.stdin.close()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _start_failure(error: ServerStartError) -> str:
    """A failed start in one line: what happened, and the last line its server logged."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if len(lines) < 2 else f"{lines[0]}; its log ends: {lines[-1]}"
