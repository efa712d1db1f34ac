"""A broken environment ends a sweep in one line within seconds, before any cell runs: never a hang or a
traceback. Each case runs the real script in a subprocess with a time limit that a hang would exceed."""

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.paths import PROJECT_ROOT

SCRIPT = str(PROJECT_ROOT / "sweeps" / "cpu_tiny.py")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_script(*flags, timeout_s=60, env=None):
    """The sweep script in dry-run mode; ``env`` adds to this process's environment (None: a variable unset)."""
    started = time.monotonic()
    merged = {key: value for key, value in {**os.environ, **(env or {})}.items() if value is not None}
    result = subprocess.run(
        [sys.executable, SCRIPT, "--engine", "fake", "--dry-run", *flags],
        capture_output=True, text=True, timeout=timeout_s, env=merged,
    )  # fmt: skip
    return result, time.monotonic() - started


def assert_one_line_error(result, message):
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr


def test_an_unreachable_tracking_server_is_one_line_within_seconds_that_never_shows_its_credentials(tmp_path):
    server = f"127.0.0.1:{closed_port()}"
    with_credentials = f"http://alice:s3cret@{server}"
    result, took_s = run_script("--results-dir", str(tmp_path), "--tracking-uri", with_credentials, timeout_s=30)
    assert_one_line_error(result, f"--tracking-uri http://{server}: no MLflow server answers there")
    assert "s3cret" not in result.stdout + result.stderr
    assert took_s < 20


def test_an_unwritable_results_dir_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result, _ = run_script("--results-dir", str(blocker / "results"))
    assert_one_line_error(result, f"--results-dir {blocker / 'results'}: {blocker} is a file, not a directory")


def test_a_ray_address_nobody_answers_at_is_one_line_within_seconds(tmp_path):
    address = f"127.0.0.1:{closed_port()}"
    result, took_s = run_script("--results-dir", str(tmp_path / "results"), "--ray-address", address, timeout_s=30)
    assert_one_line_error(result, f"--ray-address {address}: no Ray cluster answers there")
    assert took_s < 20 and not (tmp_path / "results").exists()  # nothing made before the sweep could start
    result, _ = run_script("--results-dir", str(tmp_path), env={"RAY_ADDRESS": address}, timeout_s=30)
    assert_one_line_error(result, f"RAY_ADDRESS {address}: no Ray cluster answers there")


def test_a_dead_local_cluster_on_record_is_passed_over_for_a_fresh_one_with_rays_default_authentication(tmp_path):
    """The script starts a local cluster of its own: passing over a dead one on record for a fresh one, with
    Ray's default authentication in an empty home, is the behaviour checked."""
    # Ray's temp dir of its own (short: Ray's socket paths must fit 107 bytes), recording a dead cluster.
    ray_tmp = Path(tempfile.mkdtemp(prefix="kvr", dir="/tmp"))
    (ray_tmp / "ray").mkdir()
    (ray_tmp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{closed_port()}")
    home = tmp_path / "home"
    home.mkdir()
    # RAY_AUTH_MODE unset, as a user runs it: the fresh local cluster keeps Ray's default, token authentication,
    # for which Ray writes a token into the home it finds without one.
    env = {"RAY_TMPDIR": str(ray_tmp), "RAY_ADDRESS": "", "RAY_AUTH_MODE": None, "HOME": str(home)}
    result, took_s = run_script("--results-dir", str(tmp_path), env=env, timeout_s=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is not running; starting a fresh local one" in result.stderr
    assert "sweep cpu_tiny:" in result.stdout and "Traceback" not in result.stderr
    assert (home / ".ray" / "auth_token").read_text().strip()
    assert took_s < 90
