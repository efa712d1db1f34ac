"""A long-lived process that has imported a server's modules once and forks a child per server start.

Importing vLLM takes about 10 s on two CPU cores, and a plain start pays it in a fresh interpreter for the API
server and again for the engine core (and for each worker of a tensor-parallel replica): nearly all of a 30 s start
of the tiny model. The launcher imports the modules named by ``--preload`` once, then answers requests on a unix
socket: each ``spawn`` forks a child that becomes the leader of a new session (so a teardown that signals the
server's process group reaches all of it, as for a ``start_new_session`` Popen), writes its stdout and stderr to the
files named, takes exactly the request's environment, and runs the request's ``python -m MODULE ...`` or
``python -c CODE ...`` in this interpreter as that command would have run, retitled with it. A vLLM server whose
engine core and workers fork from it in turn (``FORKED_VLLM_ENV``) imports nothing anew.

Invariants: the launcher starts no thread of its own, and what it preloads must touch no accelerator (vLLM's modules
do not at import; a preload that initializes CUDA ends the launcher, saying so; the native pools some libraries start,
OpenBLAS's, jemalloc's, are not copied by a fork, as when vLLM forks its engine core itself); a child never returns
into the launcher's loop (it leaves through ``os._exit``); the launcher reaps its children and keeps each one's exit
code (as ``Popen.returncode`` gives it: negative for a signal) for ``poll``. It exits when its stdin closes, that is
when the process that started it is gone; its children do not go with it (each server's reaper ends those with their
owner). What a preloaded module read from the environment at import stays as the launcher saw it: start the launcher
with the environment the servers share (``HF_HUB_OFFLINE``, say, is read by huggingface_hub at import), and vary per
start only what is read later (the port, a trace path, vLLM's logging configuration).

    python -m orchestrator.replica.launcher --socket PATH [--preload MODULE ...]

The caller's side is ``start_launcher`` and ``LauncherClient``; ``LaunchedProcess`` stands where a ``Popen``
of the server stood.
"""

from __future__ import annotations

import argparse
import atexit
import builtins
import importlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.paths import with_project_on_path

# What a vLLM OpenAI server start imports in its processes (API server, engine core, the device's worker), by the
# device it serves on: its worker module is the one part that differs.
_VLLM_SERVER_MODULES = (
    "vllm.entrypoints.openai.api_server",
    "vllm.v1.engine.core",
    "vllm.v1.executor.multiproc_executor",  # tensor-parallel ranks
    "vllm.v1.executor.uniproc_executor",  # one rank inside the engine core
)
_VLLM_WORKER_MODULE = {"cpu": "vllm.v1.worker.cpu_worker", "gpu": "vllm.v1.worker.gpu_worker"}
# The environment that makes a vLLM server started by the launcher fork its engine core and workers from itself
# too, so that none of them imports vLLM anew (``_keep_vllm_fork`` holds it against the CPU platform's choice).
FORKED_VLLM_ENV = {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}
MAX_REQUEST_BYTES = 1 << 20
_BAD_FORK_EXIT = 86  # what the launcher's look-out child answers where torch marked it unable to use CUDA


class LauncherError(RuntimeError):
    """The launcher refused a request or could not be reached; the message says which and why."""


class LauncherRefused(LauncherError):
    """The launcher could not be made ready: a module would not preload, or preloading touched the accelerator
    (which a forked server could then not use). Starting it again would meet the same; start servers plainly."""


def vllm_preload(device: str) -> tuple[str, ...]:
    """The modules a launcher preloads for vLLM servers on ``device`` (``cpu`` or ``gpu``)."""
    return (*_VLLM_SERVER_MODULES, _VLLM_WORKER_MODULE[device])


# ---------------------------------------------------------------------------------------------- the launcher


@dataclass
class _Children:
    """The launcher's children: those still running, and the exit code of each that ended."""

    running: set[int]
    exit_codes: dict[int, int]

    def reap(self) -> None:
        for pid in list(self.running):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                self.running.discard(pid)
                self.exit_codes[pid] = os.waitstatus_to_exitcode(status)

    def poll(self, pid: int) -> int | None:
        if pid not in self.running and pid not in self.exit_codes:
            raise LauncherError(f"pid {pid} is no child of this launcher")
        return self.exit_codes.get(pid)


def serve(listener: socket.socket, owner: int = 0) -> None:
    """Answers requests on ``listener`` until ``owner`` (a readable fd, the launcher's stdin) reads end of file."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a Python handler, so that SIGCHLD reaches the wakeup fd
    children = _Children(set(), {})
    inherited = (listener.fileno(), wake_read, wake_write, owner)
    while True:
        readable, _, _ = select.select([listener, owner, wake_read], [], [])
        if wake_read in readable:
            os.read(wake_read, 4096)
        children.reap()
        if owner in readable and not os.read(owner, 4096):
            return
        if listener in readable:
            connection, _ = listener.accept()
            with connection:
                _answer(connection, children, inherited)


def _answer(connection: socket.socket, children: _Children, inherited: tuple[int, ...]) -> None:
    connection.settimeout(10.0)
    try:
        request = json.loads(_read_line(connection))
        if request.get("op") == "spawn":
            reply = {"pid": _spawn(request, children, (*inherited, connection.fileno()))}
        elif request.get("op") == "poll":
            reply = {"exit_code": children.poll(int(request["pid"]))}
        elif request.get("op") == "ping":
            reply = {"pid": os.getpid(), "num_threads": len(os.listdir("/proc/self/task"))}
        else:
            reply = {"error": f"unknown op {request.get('op')!r}: valid: spawn, poll, ping"}
    except (LauncherError, OSError, ValueError, KeyError, TypeError) as error:
        reply = {"error": f"{type(error).__name__}: {error}"}
    try:
        connection.sendall(json.dumps(reply).encode() + b"\n")
    except OSError:
        pass  # the caller gave up; a spawned child runs on and is reaped like any other


def _read_line(connection: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(65536)
        if not chunk or len(data) > MAX_REQUEST_BYTES:
            raise ValueError(f"request not ended by a newline within {MAX_REQUEST_BYTES} bytes")
        data += chunk
    return data


def _spawn(request: dict, children: _Children, inherited: tuple[int, ...]) -> int:
    argv, env = [str(arg) for arg in request["argv"]], {str(k): str(v) for k, v in request["env"].items()}
    _check_argv(argv)
    files = [os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
             for name in ("stdout", "stderr") if request.get(name)]  # fmt: skip
    # The child says when it leads its own session: a pid returned earlier names a process group that does not exist
    # yet, and the server's reaper, probing it at once, would take it for one already gone (Popen returns after the
    # child's setsid too).
    in_session, said_so = os.pipe()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(in_session)
                _enter_child(files[0], files[-1], inherited)
                os.write(said_so, b"1")
                os.close(said_so)
                code = _run(argv, env, request.get("cwd"))
            finally:
                _exit(code)  # never back into the launcher's loop, whatever happened
    finally:
        os.close(said_so)
        for fd in files:
            os.close(fd)
    try:
        os.read(in_session, 1)  # b"" if the child ended first: its pid is then reported as ended
    finally:
        os.close(in_session)
    children.running.add(pid)
    return pid


def _check_argv(argv: Sequence[str]) -> None:
    if len(argv) < 3 or argv[1] not in ("-m", "-c"):
        raise LauncherError(f"cannot run {list(argv[:3])}: valid: [python, '-m', MODULE, ...] or "
                            f"[python, '-c', CODE, ...]")  # fmt: skip
    if argv[0] != sys.executable:
        raise LauncherError(f"the command's interpreter {argv[0]} is not the launcher's: valid: {sys.executable}")


def _enter_child(stdout: int, stderr: int, inherited: tuple[int, ...]) -> None:
    """The child's process state as a ``start_new_session`` Popen with these files would give it."""
    os.setsid()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((null, 0), (stdout, 1), (stderr, 2)):
        os.dup2(source, target)
    for fd in {null, stdout, stderr, *inherited} - {0, 1, 2}:
        os.close(fd)


def _run(argv: Sequence[str], env: Mapping[str, str], cwd: str | None) -> int:
    """Runs the command in this (forked) interpreter and returns its exit code, finishing as an interpreter would:
    non-daemon threads joined, atexit functions run, standard streams flushed."""
    os.environ.clear()
    os.environ.update(env)
    if cwd:
        os.chdir(cwd)
    # ``python`` reads PYTHONPATH at start; the launcher's sys.path was fixed before this request's environment.
    sys.path[:0] = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry and entry not in sys.path]
    if (titles := sys.modules.get("setproctitle")) is not None:
        titles.setproctitle(" ".join(argv))  # what ps and /proc/PID/cmdline show: the command, as if run by itself
    try:
        if argv[1] == "-m":
            _keep_vllm_fork(env)
            # The preloaded module runs again as __main__, as under ``python -m`` after an import of it.
            warnings.filterwarnings("ignore", ".* found in sys.modules after import of package", RuntimeWarning)
            sys.argv = [argv[2], *argv[3:]]
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *argv[3:]]
            exec(compile(argv[2], "<string>", "exec"), {"__name__": "__main__", "__builtins__": builtins})
        code = 0
    except SystemExit as exit_:
        code = _exit_code(exit_.code)
    except KeyboardInterrupt:
        code = -signal.SIGINT  # python ends by SIGINT after an uncaught KeyboardInterrupt
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # what interpreter shutdown does before atexit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    return code


def _exit(code: int) -> None:
    """Ends the child with ``code``, a negative one by that signal (as Popen reports a signal's end)."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _keep_vllm_fork(env: Mapping[str, str]) -> None:
    """vLLM's CPU platform sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` whatever the caller chose, and a spawned
    engine core and worker import vLLM anew; where the request asks for ``fork``, it is kept. Only where the CPU
    platform is loaded (the CPU worker's preload loads it; on a GPU vLLM forks by default)."""
    asks_fork = all(env.get(name) == value for name, value in FORKED_VLLM_ENV.items())
    if not asks_fork or "vllm.platforms.cpu" not in sys.modules:
        return
    from vllm.platforms.cpu import CpuPlatform

    update = CpuPlatform.check_and_update_config.__func__

    def update_keeping_fork(cls, vllm_config) -> None:
        update(cls, vllm_config)
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"

    CpuPlatform.check_and_update_config = classmethod(update_keeping_fork)


def _init_titles() -> None:
    """Readies setproctitle (vLLM retitles its engine core and workers with it) while this process's environment is
    the one it started with: it writes over the memory of the initial argv and environment, which it no longer
    finds once a child has replaced ``os.environ``, and then silently leaves every title as the launcher's."""
    try:
        import setproctitle
    except ImportError:
        return
    setproctitle.setproctitle(setproctitle.getproctitle())


def _accelerator_touched() -> str | None:
    """What the preloading did to CUDA that a forked child cannot live with, if anything: CUDA initialized here, or
    the driver initialized without it (torch's default ``is_available()`` runs ``cuInit``, hence the launcher's
    NVML-based check; a module may also ask the runtime for its devices itself), which torch marks in every child
    forked afterwards ("Cannot re-initialize CUDA in forked subprocess"). A child forked to look tells the second
    apart. vLLM's own modules do neither at import: vLLM itself forks its engine core from the API server on a GPU
    unless CUDA is initialized there."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if torch.cuda.is_initialized():
        return "CUDA"
    pid = os.fork()
    if pid == 0:
        os._exit(_BAD_FORK_EXIT if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return "the CUDA driver" if os.waitstatus_to_exitcode(status) == _BAD_FORK_EXIT else None


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--socket", type=Path, required=True, help="the unix socket to listen on (created)")
    parser.add_argument("--preload", action="append", default=[], help="a module to import before serving")
    args = parser.parse_args(argv)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(args.socket))
    listener.listen(64)  # a caller's first request waits in the backlog while the modules load
    try:
        _init_titles()
        # torch.cuda.is_available() asks NVML instead of initializing the driver, which forked children could not use.
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        for module in args.preload:
            importlib.import_module(module)
        if touched := _accelerator_touched():
            raise SystemExit(f"launcher: preloading {', '.join(args.preload)} initialized {touched}, which a "
                             f"server forked from here could not use: start servers without a launcher")  # fmt: skip
        if (num_threads := len(os.listdir("/proc/self/task"))) > 1:
            print(f"launcher: {num_threads} threads after preloading (native pools of the imported libraries); "
                  f"each fork copies only the forking one", file=sys.stderr)  # fmt: skip
        serve(listener)
    finally:
        listener.close()
        args.socket.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------- the caller's side


class LauncherClient:
    """Talks to a launcher at ``socket_path``; one connection per request."""

    def __init__(self, socket_path: str | Path, timeout_s: float = 30.0):
        self.socket_path = Path(socket_path)
        self.timeout_s = timeout_s

    def request(self, message: dict, timeout_s: float | None = None) -> dict:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(timeout_s or self.timeout_s)
            try:
                connection.connect(str(self.socket_path))
                connection.sendall(json.dumps(message).encode() + b"\n")
                reply = json.loads(_read_line(connection))
            except (OSError, ValueError) as error:
                op = message.get("op")
                raise LauncherError(f"launcher at {self.socket_path} did not answer {op}: {error}") from error
        if "error" in reply:
            raise LauncherError(f"launcher refused {message.get('op')}: {reply['error']}")
        return reply

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], stdout: Path, stderr: Path | None = None,
              cwd: Path | None = None) -> LaunchedProcess:  # fmt: skip
        """Starts ``argv`` with exactly ``env`` (not added to the launcher's), stdout appended to ``stdout``
        and stderr to ``stderr`` (or to ``stdout`` too)."""
        message = {"op": "spawn", "argv": list(argv), "env": dict(env), "stdout": str(Path(stdout).absolute()),
                   "stderr": str(Path(stderr).absolute()) if stderr else None,
                   "cwd": str(cwd) if cwd else None}  # fmt: skip
        return LaunchedProcess(self, self.request(message)["pid"])

    def poll(self, pid: int) -> int | None:
        return self.request({"op": "poll", "pid": pid})["exit_code"]

    def ping(self, timeout_s: float | None = None) -> dict:
        return self.request({"op": "ping"}, timeout_s)


class LaunchedProcess:
    """A launcher's child seen as the part of ``subprocess.Popen`` a server's owner uses: ``pid`` (also its
    process group), ``poll``, ``wait``, ``returncode``."""

    def __init__(self, client: LauncherClient, pid: int):
        self.client = client
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.client.poll(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None, poll_s: float = 0.05) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"launched pid {self.pid}", timeout)
            time.sleep(poll_s)
        return self.returncode


def start_launcher(socket_path: Path, preload: Sequence[str] = (), env: Mapping[str, str] | None = None,
                   timeout_s: float = 300.0) -> tuple[subprocess.Popen, LauncherClient]:  # fmt: skip
    """Starts a launcher that preloads ``preload`` under ``env`` and returns once it answers; ``LauncherRefused``
    (with the launcher's last line, from ``launcher.log`` beside the socket) where it ends before that, and
    ``LauncherError`` where it does not answer within ``timeout_s``. It lives as long as the returned Popen's stdin
    stays open (close it, or let this process end, to stop the launcher)."""
    env = with_project_on_path(os.environ if env is None else env)
    argv = [sys.executable, "-m", "orchestrator.replica.launcher", "--socket", str(socket_path)]
    argv += [arg for module in preload for arg in ("--preload", module)]
    log_path = socket_path.with_name("launcher.log")
    socket_path.unlink(missing_ok=True)  # left by a launcher that was killed: binding over it would fail
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stderr=log)
    client = LauncherClient(socket_path)
    deadline = time.monotonic() + timeout_s
    while not socket_path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        client.ping(timeout_s=max(1.0, deadline - time.monotonic()))  # answered once the preloading is done
    except LauncherError:
        raise _refusal(process, log_path, timeout_s) from None
    return process, client


def _refusal(process: subprocess.Popen, log_path: Path, timeout_s: float) -> LauncherError:
    """Why a launcher never answered, its process ended: it exited (a preload failed: ``LauncherRefused``), or it
    ran out of time (a slow machine's, which a later start may not meet: ``LauncherError``)."""
    try:
        code = process.wait(timeout=5.0)  # a launcher that closed its socket is on its way out
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return LauncherError(f"launcher did not answer within {timeout_s:g} s: {_last_line(log_path)}")
    return LauncherRefused(f"launcher ended before it answered (exit code {code}): {_last_line(log_path)}")


def _last_line(path: Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "it printed nothing"


if __name__ == "__main__":
    main()
