"""The forking launcher's machinery with plain ``python -c`` and ``python -m`` children (no vLLM): what each child
gets (its own session and process group, exactly the environment asked, its output files, an empty stdin), how its
end is reported, what is refused, and that the launcher ends with its owner."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from orchestrator.replica.launcher import LauncherError, LauncherRefused, start_launcher
from orchestrator.replica.server import group_members

_REPORT = textwrap.dedent(
    """
    import json, os, sys
    print(json.dumps({"pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0), "env": dict(os.environ),
                      "argv": sys.argv, "cwd": os.getcwd(), "stdin": sys.stdin.read()}))
    print("to stderr", file=sys.stderr)
    """
)


@pytest.fixture(scope="module")
def launcher():
    # A short directory: a unix socket's path must fit in 107 bytes.
    socket_dir = Path(tempfile.mkdtemp(prefix="kvl-"))
    process, client = start_launcher(socket_dir / "launcher.sock", env={**os.environ, "LAUNCHER_ONLY": "1"})
    yield process, client
    if process.poll() is None:
        process.stdin.close()
        process.wait(timeout=30)
    shutil.rmtree(socket_dir, ignore_errors=True)


def _wait_for_line(path: Path, deadline_s: float = 60.0) -> str:
    deadline = time.monotonic() + deadline_s
    while not (text := path.read_text() if path.exists() else "").endswith("\n") and time.monotonic() < deadline:
        time.sleep(0.02)
    return text


def test_a_child_leads_its_own_session_with_exactly_its_environment_and_files(launcher, tmp_path):
    _, client = launcher
    child = client.spawn([sys.executable, "-c", _REPORT, "first", "second"], {"ONLY_CHILD": "yes"}, tmp_path / "out",
                         stderr=tmp_path / "err", cwd=tmp_path)  # fmt: skip
    assert child.wait(timeout=60) == 0
    report = json.loads((tmp_path / "out").read_text())
    assert report["pid"] == report["pgid"] == report["sid"] == child.pid  # killpg(pid) reaches all it starts
    assert report["env"] == {"ONLY_CHILD": "yes"}  # the request's environment, nothing of the launcher's
    assert report["argv"] == ["-c", "first", "second"]
    assert report["cwd"] == str(tmp_path)
    assert report["stdin"] == ""
    assert (tmp_path / "err").read_text() == "to stderr\n"


def test_a_module_runs_as_main_from_the_requested_pythonpath_and_finishes_like_an_interpreter(launcher, tmp_path):
    _, client = launcher
    (tmp_path / "greeter.py").write_text(textwrap.dedent(
        """
        import atexit, sys
        atexit.register(print, "atexit ran")
        if __name__ == "__main__":
            print("main", sys.argv[1:])
        """
    ))  # fmt: skip
    argv = [sys.executable, "-m", "greeter", "--flag", "1"]
    child = client.spawn(argv, {"PYTHONPATH": str(tmp_path)}, tmp_path / "out")
    assert child.wait(timeout=60) == 0
    assert (tmp_path / "out").read_text() == "main ['--flag', '1']\natexit ran\n"  # one file for both streams


def test_a_child_shows_its_own_command_line_not_the_launchers(launcher, tmp_path):
    pytest.importorskip("setproctitle")
    _, client = launcher
    code = "print(open('/proc/self/cmdline').read().replace(chr(0), ' ').rstrip())"
    child = client.spawn([sys.executable, "-c", code, "--port", "1"], {}, tmp_path / "out")
    assert child.wait(timeout=60) == 0
    assert (tmp_path / "out").read_text() == f"{sys.executable} -c {code} --port 1\n"


@pytest.mark.parametrize(
    ("code", "exit_code"),
    [("import sys; sys.exit(3)", 3), ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
     ("raise ValueError('boom')", 1), ("raise KeyboardInterrupt", -signal.SIGINT), ("pass", 0)],
)  # fmt: skip
def test_each_end_of_a_child_is_reported_as_popen_reports_it(launcher, tmp_path, code, exit_code):
    _, client = launcher
    child = client.spawn([sys.executable, "-c", code], {}, tmp_path / "out")
    assert child.wait(timeout=60) == exit_code
    assert child.poll() == exit_code
    if exit_code == 1:
        assert "ValueError: boom" in (tmp_path / "out").read_text()


def test_a_childs_process_group_exists_once_spawn_returns(launcher, tmp_path):
    """As with ``Popen(start_new_session=True)``: the server's reaper, started right after, probes the group and
    takes one that does not exist yet for one already gone (and then watches nothing: a driver killed later left
    its server running)."""
    _, client = launcher
    children = [client.spawn([sys.executable, "-c", "import time; time.sleep(30)"], {}, tmp_path / f"out{number}")
                for number in range(20)]  # fmt: skip
    groups = [os.getpgid(child.pid) for child in children]
    for child in children:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    assert groups == [child.pid for child in children]


def test_killing_a_childs_group_ends_it_and_what_it_started(launcher, tmp_path):
    _, client = launcher
    code = ("import subprocess, sys, time; grandchild = subprocess.Popen([sys.executable, '-c', 'import time; "
            "time.sleep(600)']); print(grandchild.pid, flush=True); time.sleep(600)")  # fmt: skip
    child = client.spawn([sys.executable, "-c", code], {}, tmp_path / "out")
    grandchild = int(_wait_for_line(tmp_path / "out"))
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0)
    assert set(group_members(child.pid)) == {child.pid, grandchild}
    os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(timeout=60) == -signal.SIGKILL
    deadline = time.monotonic() + 60
    while group_members(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_members(child.pid) == []


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [(["python3", "-c", "pass"], "is not the launcher's"), ([sys.executable, "script.py", "x"], "valid: [python, '-m'"),
     ([sys.executable, "-m"], "valid: [python, '-m'")],
)  # fmt: skip
def test_a_command_the_launcher_cannot_run_is_refused(launcher, tmp_path, argv, refusal):
    _, client = launcher
    with pytest.raises(LauncherError, match=refusal.replace("[", r"\[")):
        client.spawn(argv, {}, tmp_path / "out")


def test_a_pid_that_is_not_its_child_is_refused(launcher):
    _, client = launcher
    with pytest.raises(LauncherError, match=f"pid {os.getpid()} is no child"):
        client.poll(os.getpid())


def test_the_launcher_ends_when_its_owner_closes_its_stdin(tmp_path):
    socket_path = Path(tempfile.mkdtemp(prefix="kvl-")) / "launcher.sock"
    process, client = start_launcher(socket_path)
    assert client.ping()["num_threads"] == 1
    process.stdin.close()
    assert process.wait(timeout=60) == 0
    assert [path.name for path in socket_path.parent.iterdir()] == ["launcher.log"]  # its socket gone, its log kept
    shutil.rmtree(socket_path.parent)


@pytest.mark.parametrize("state, touched", [("initialized", "CUDA"), ("driver", "the CUDA driver")])
def test_a_launcher_whose_preloading_touched_cuda_ends_saying_so_and_leaves_no_socket(state, touched):
    """A forked server could not use CUDA initialized before the fork: the launcher refuses, in its last line."""
    socket_path = Path(tempfile.mkdtemp(prefix="kvl-")) / "launcher.sock"
    try:
        with pytest.raises(LauncherRefused) as refused:
            start_launcher(socket_path, ("tests.replica.fake_cuda_touched",), {**os.environ, "FAKE_CUDA": state})
        assert str(refused.value) == (
            f"launcher ended before it answered (exit code 1): launcher: preloading tests.replica.fake_cuda_touched "
            f"initialized {touched}, which a server forked from here could not use: start servers without a launcher")
        assert not socket_path.exists()
    finally:
        shutil.rmtree(socket_path.parent)
