from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.replica.server import free_port
from orchestrator.sweep.planning.options import SweepOptions
from orchestrator.sweep.planning.spec import EngineKind, RunLimits, SweepSpec
from orchestrator.sweep.runtime.tracking import SweepTracker, default_tracking_uri
from orchestrator.workload.spec import WorkloadSpec

GB = 10**9


def fake_spec(name: str, **overrides) -> SweepSpec:
    """A sweep on the fake engine (no model) with short tool times: fast, so the orchestration is what is under
    test."""
    fields = dict(
        name=name,
        engine=EngineKind.FAKE,
        gpus=("cpu",),
        policies=("fcfs",),
        jps=(2,),
        workload=WorkloadSpec(jps=1, duration_s=2, scale=0.05, tool_time_s=0.1),
        limits=RunLimits(health_timeout_s=60, hang_timeout_s=20, poll_s=0.2),
    )
    return SweepSpec(**(fields | overrides))


def options(results_dir: Path, **overrides) -> SweepOptions:
    fields = dict(results_dir=results_dir, tracking_uri=default_tracking_uri(results_dir), live=False, progress_interval_s=30)
    return SweepOptions(**(fields | overrides))


def summary(results_dir: Path, sweep: str) -> pd.DataFrame:
    return pd.read_parquet(results_dir / sweep / "summary.parquet")


def runs_by_key(results_dir: Path, sweep: str) -> dict:
    tracker = SweepTracker.read_only(default_tracking_uri(results_dir), sweep)
    return tracker.cell_runs() if tracker else {}


@pytest.fixture(scope="module")
def fake_gpu_cluster():
    """A Ray cluster of four local nodes: a head without GPUs, an 'H100' node and an 'A100' node of one GPU each, and an
    'L4' node of two (for a cell that needs both).

    The GPUs are declared resources only (this machine has none); cells on them use the fake engine.
    Yields the node id of each GPU type."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    nodes = {
        gpu: cluster.add_node(num_cpus=1, num_gpus=num_gpus, memory=4 * GB, resources={f"accelerator_type:{gpu}": 1})
        for gpu, num_gpus in (("H100", 1), ("A100", 1), ("L4", 2))
    }
    ray.init(address=cluster.address, log_to_driver=False)
    yield {gpu: node.node_id for gpu, node in nodes.items()}
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="module")
def ray_head():
    """A local Ray cluster (head only) that driver subprocesses connect to; it outlives a killed driver."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    yield cluster.address
    cluster.shutdown()


def ray_client_env(home: Path) -> dict[str, str]:
    """This process's environment with RAY_AUTH_MODE and the token variables unset (the ordinary case) and ``home``
    as HOME, where Ray looks for ``.ray/auth_token``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_AUTH")}
    return env | {"HOME": str(home)}


@dataclass(frozen=True)
class SecureHead:
    """A running head that asks for a token, and the environments its clients run in."""

    address: str  # its GCS, HOST:PORT
    job_api: str  # http://HOST:PORT of its dashboard and job API
    home: Path  # a home whose ~/.ray/auth_token is the cluster's token

    def client_env(self, home: Path | None = None) -> dict[str, str]:
        """A client's environment (``ray_client_env``) with ``home`` as HOME, by default the one holding the token."""
        return ray_client_env(home or self.home)


@pytest.fixture(scope="module")
def secure_ray_head(tmp_path_factory):
    """A head started as the recipes start theirs: the token made with `ray get-auth-token --generate` in
    ~/.ray/auth_token (0600), `ray start --head` with RAY_AUTH_MODE=token, its job API on every address. It
    outlives a killed driver; `ray stop` at the end stops every Ray process of this machine's user."""
    ray_cli = str(Path(sys.executable).parent / "ray")
    home = tmp_path_factory.mktemp("home")
    head = SecureHead("", "", home)
    subprocess.run(f"umask 077 && {ray_cli} get-auth-token --generate > /dev/null", shell=True, check=True,
                   env=head.client_env(), timeout=60)  # fmt: skip
    dashboard_port = free_port()
    started = subprocess.run([ray_cli, "start", "--head", f"--port={free_port()}", f"--dashboard-port={dashboard_port}",
                              "--dashboard-host=0.0.0.0", "--num-cpus=2", "--disable-usage-stats"],
                             env=head.client_env() | {"RAY_AUTH_MODE": "token"}, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    assert started.returncode == 0, started.stderr
    address = re.search(r"ray start --address='([^']+)'", started.stdout + started.stderr).group(1)
    yield SecureHead(address, f"http://127.0.0.1:{dashboard_port}", home)
    subprocess.run([ray_cli, "stop", "--force"], env=head.client_env(), capture_output=True, timeout=120)
