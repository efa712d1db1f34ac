from __future__ import annotations

import sys
import textwrap
import time

import pytest

from orchestrator.replica.server import (
    ServerCommand,
    ServerProcess,
    ServerStartError,
    StartLimits,
    free_port,
    group_members,
)

# A server that forks a grandchild (as vLLM forks its engine core) and ignores SIGTERM in both.
_STUBBORN_SERVER = textwrap.dedent(
    """
    import http.server, os, signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() == 0:
        while True:
            time.sleep(1)
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *args):
            pass
    print("serving", flush=True)
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
    """
)

# A server that answers /health once it listens.
_HEALTHY = textwrap.dedent(
    """
    import http.server, sys
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
    """
)


def _command(script: str, port: int) -> ServerCommand:
    return ServerCommand(argv=(sys.executable, "-c", script, str(port)), port=port)


def test_stop_kills_the_whole_process_group_even_when_sigterm_is_ignored(tmp_path):
    """A live stand-in server that forks a child, as vLLM forks its engine core, and ignores SIGTERM: ``stop``
    must end the whole group, which only a real process group shows."""
    server = ServerProcess(_command(_STUBBORN_SERVER, free_port()), tmp_path / "server.log")
    server.start(StartLimits(timeout_s=30))
    group = server.pid
    assert len(group_members(group)) == 2
    started = time.monotonic()
    server.stop(grace_s=1.0)
    assert group_members(group) == []
    assert time.monotonic() - started < 5
    assert "serving" in (tmp_path / "server.log").read_text()


def test_a_server_that_exits_reports_its_log_tail(tmp_path):
    script = "import sys; print('bad flag --frobnicate'); sys.exit(3)"
    server = ServerProcess(_command(script, free_port()), tmp_path / "server.log")
    with pytest.raises(ServerStartError, match="(?s)code 3.*bad flag --frobnicate"):
        server.start(StartLimits(timeout_s=30))


def test_a_server_that_never_gets_healthy_is_stopped_at_the_deadline(tmp_path):
    script = "import time\nprint('loading', flush=True)\ntime.sleep(60)"
    server = ServerProcess(_command(script, free_port()), tmp_path / "server.log")
    with pytest.raises(ServerStartError, match="not healthy"):
        server.start(StartLimits(timeout_s=1.5))
    assert not server.is_running()


def test_a_slow_start_that_shows_signs_of_life_is_given_its_time_and_a_silent_one_is_ended_as_hung(tmp_path):
    """Both under a generous start limit (30 s) and a short stall limit (2 s): one prints a line a second for 4 s
    (a cold compile cache, weights on a slow filesystem), the other prints once and waits on nothing."""
    slow = ("import time\nfor step in range(8):\n    print('loading', step, flush=True)\n    time.sleep(0.5)\n"
            + _HEALTHY)
    server = ServerProcess(_command(slow, free_port()), tmp_path / "slow.log")
    started = time.monotonic()
    server.start(StartLimits(timeout_s=30, stall_s=2))
    assert time.monotonic() - started >= 4 and server.is_running()
    server.stop()
    hung = "import time\nprint('loading', flush=True)\ntime.sleep(60)"
    server = ServerProcess(_command(hung, free_port()), tmp_path / "hung.log")
    started = time.monotonic()
    with pytest.raises(ServerStartError, match=r"(?s)hung while starting: no log output, CPU time or I/O for 2 s.*loading"):
        server.start(StartLimits(timeout_s=30, stall_s=2))
    assert time.monotonic() - started < 15 and not server.is_running()
