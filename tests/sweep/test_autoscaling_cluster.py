"""On Ray's fake autoscaling provider (fake nodes on this machine): a sweep of a launchable GPU type makes
a node launch and its cells run there; a type the autoscaler cannot launch pends (or is simulated under
``auto``); a type that never comes up pends after the scale-up timeout; the sweep withdraws its ask."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from orchestrator.paths import PROJECT_ROOT
from orchestrator.replica.server import free_port
from tests.processes import kill_processes_naming

BIN = Path(sys.executable).parent
# The fake provider's nodes join the head at port 6379, whatever the head uses.
GCS_PORT = 6379
FAKE_NODE_PREFIX = "fffffffffffffffffffffffffffffffffffffffffffffffffff"

CONFIG = {
    "cluster_name": "kvsweep-fake",
    "max_workers": 2,
    "upscaling_speed": 1.0,
    "idle_timeout_minutes": 1,
    "provider": {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                 "disable_launch_config_check": True},
    "auth": {"ssh_user": "ubuntu"},
    "head_node_type": "ray.head.default",
    "available_node_types": {
        "ray.head.default": {"resources": {"CPU": 2}, "node_config": {}, "max_workers": 0},
        "h100": {"resources": {"CPU": 1, "GPU": 1, "accelerator_type:H100": 1}, "node_config": {},
                 "min_workers": 0, "max_workers": 1},
        # The fake provider cannot start a node that declares memory: a type that never comes up.
        "l40s": {"resources": {"CPU": 1, "GPU": 1, "accelerator_type:L40S": 1, "memory": 8 * 2**30},
                 "node_config": {}, "min_workers": 0, "max_workers": 1},
    },
    **{key: [] for key in ("initialization_commands", "setup_commands", "head_setup_commands",
                           "worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands")},
    "file_mounts": {},
    "cluster_synced_files": [],
    "file_mounts_sync_continuously": False,
}  # fmt: skip


def ray_cli(*args: str, env: dict | None = None, timeout_s: float = 120) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "RAY_AUTH_MODE": "disabled", **(env or {})}
    return subprocess.run([str(BIN / "ray"), *args], capture_output=True, text=True, timeout=timeout_s, env=full_env)


@pytest.fixture(scope="module")
def autoscaling_head():
    """A fake autoscaling cluster: a CPU head whose autoscaler can launch one fake H100 node. Yields the
    GCS address. Only this cluster's processes are stopped afterwards (``ray stop`` would end them all)."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", GCS_PORT)) == 0:
            pytest.fail(f"something already listens on port {GCS_PORT}, which the fake provider's nodes need")
    temp_dir = Path(tempfile.mkdtemp(prefix="kvas", dir="/tmp"))  # short: Ray's socket paths are limited
    config_path = temp_dir / "autoscaler.yaml"
    config_path.write_text(yaml.safe_dump(CONFIG))
    started = ray_cli("start", "--head", f"--port={GCS_PORT}", f"--autoscaling-config={config_path}", "--num-cpus=2",
                      f"--temp-dir={temp_dir}", "--include-dashboard=false", "--disable-usage-stats",
                      f"--dashboard-agent-listen-port={free_port()}", f"--ray-client-server-port={free_port()}",
                      env={"RAY_FAKE_CLUSTER": "1"})  # fmt: skip
    assert started.returncode == 0, started.stdout + started.stderr
    address = next(line.split("'")[1] for line in started.stdout.splitlines() if "ray start --address=" in line)
    yield address
    # Its processes name the temp dir; the workers its nodes started (retitled ``ray::...``) do not, but
    # they descend from them. And `ray start` recorded the address in Ray's own temp dir, where every later
    # ``ray.init()`` of this test session would find it and try to join a cluster that is gone.
    kill_processes_naming(str(temp_dir))
    from ray._common.utils import reset_ray_address
    from ray._private.utils import read_ray_address

    if read_ray_address() == address:
        reset_ray_address()


def sweep(script: str, results: Path, address: str, *flags: str, timeout_s: float = 240) -> subprocess.CompletedProcess:
    command = [sys.executable, str(PROJECT_ROOT / "sweeps" / script), "--results-dir", str(results),
               "--ray-address", address, *flags]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, "RAY_ADDRESS": ""})


def test_dry_run_says_which_types_are_launchable_and_simulates_only_the_rest_under_auto(autoscaling_head, tmp_path):
    result = sweep("large_dram.py", tmp_path, autoscaling_head, "--gpus", "H100,A100", "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "H100: launchable (max 1 GPUs)" in result.stdout or "H100: up (1 GPUs on 1 node(s))" in result.stdout
    h100 = [line for line in result.stdout.splitlines() if "H100 fcfs jps=1 " in line]
    a100 = [line for line in result.stdout.splitlines() if "A100 (sim) fcfs jps=1 " in line]
    assert h100 and "on a H100 slot" in h100[0] and a100 and "in the simulator" in a100[0]


def test_a_launchable_type_scales_up_and_runs_an_absent_one_pends_and_a_stuck_one_times_out(autoscaling_head, tmp_path):
    result = sweep("cpu_tiny.py", tmp_path, autoscaling_head, "--engine", "fake", "--gpus", "H100,A100,L40S",
                   "--policies", "fcfs", "--jps", "2,3", "--duration-s", "2", "--scale", "0.05",
                   "--scale-up-timeout-s", "45")  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "asking the autoscaler for H100 GPUs" in result.stdout
    rows = pd.read_parquet(tmp_path / "cpu_tiny" / "summary.parquet").set_index("gpu")
    h100 = rows.loc[["H100"]]
    assert list(h100.status) == ["done", "done"], f"{list(h100.reason)}\n{result.stdout[-3000:]}"
    assert all(node.startswith(FAKE_NODE_PREFIX) for node in h100.node_id), "H100 cells ran off the launched node"
    assert all(h100.num_completed == h100.num_jobs)
    assert list(rows.loc[["A100"]].status) == ["pending", "pending"]
    assert all("no A100 in the cluster and none its autoscaler can launch" in r for r in rows.loc[["A100"]].reason)
    assert list(rows.loc[["L40S"]].status) == ["pending", "pending"]
    assert all("brought up no L40S node within 45 s" in r for r in rows.loc[["L40S"]].reason)
    assert resource_requests_withdrawn(autoscaling_head)


DEMAND_MARK = "request_demand="


def resource_requests_withdrawn(address: str, timeout_s: float = 30) -> bool:
    """True once the autoscaler's status shows no request_resources demand (it refreshes every few seconds)."""
    probe = (
        "import json, ray; from ray.experimental.internal_kv import _internal_kv_get;"
        f"ray.init(address={address!r}, logging_level='ERROR');"
        "status = json.loads(_internal_kv_get('__autoscaling_status') or b'{}');"
        f"print({DEMAND_MARK!r} + json.dumps(status.get('load_metrics_report', {{}}).get('request_demand')))"
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "RAY_AUTH_MODE": "disabled"}).stdout  # fmt: skip
        # The probe's driver also prints the cluster's autoscaler events ("(autoscaler +0s) Failed to launch"),
        # so its answer is the marked line, wherever it falls.
        demands = [line.removeprefix(DEMAND_MARK) for line in out.splitlines() if line.startswith(DEMAND_MARK)]
        if demands and json.loads(demands[-1]) in ([], None):
            return True
        time.sleep(3)
    return False
