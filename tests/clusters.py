"""The Ray clusters the tests start: the shared local cluster, with nodes of declared GPUs where a test needs them,
and a head that asks for a token as the recipes start theirs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from orchestrator.replica.server import free_port

GB = 10**9
# What the suite's nodes leave out of Ray's defaults, on two cores where every process counts: each node's log monitor
# (it forwards workers' output to drivers; the suite reads records and server logs, not that) and the workers Ray
# prestarts for each driver that connects (every sweep a test runs as a process is one), which the cell workers,
# clients and Serve replicas never take: each asks for a runtime environment of its own.
TEST_NODE = {"include_log_monitor": False}
TEST_HEAD = TEST_NODE | {"_system_config": {"prestart_worker_first_driver": False, "enable_worker_prestart": False}}


@dataclass(frozen=True)
class RayCluster:
    address: str  # its GCS, HOST:PORT, for drivers in other processes
    cluster: object  # the ``ray.cluster_utils.Cluster``, to add nodes to


def start_shared_cluster():
    """A local cluster of one node, a head of 2 CPUs without GPUs (where ``cpu`` and simulated cells run): a
    ``ray.cluster_utils.Cluster``, to which ``add_fake_gpu_nodes`` adds nodes."""
    from ray.cluster_utils import Cluster

    return Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False, **own_ports(),
                                                         **TEST_HEAD})  # fmt: skip


def add_fake_gpu_nodes(cluster) -> dict[str, str]:
    """An 'H100' node and an 'A100' node of one GPU each and an 'L4' node of two (for a cell that needs both),
    added to ``cluster``; the node id of each type. The GPUs are declared resources only (this machine has none);
    cells on them use the fake engine. Idle, each node costs about 1.5% of a core: they join where a test asks."""
    return {
        gpu: cluster.add_node(num_cpus=1, num_gpus=num_gpus, memory=4 * GB, resources={f"accelerator_type:{gpu}": 1},
                              **own_ports(), **TEST_NODE).node_id  # fmt: skip
        for gpu, num_gpus in (("H100", 1), ("A100", 1), ("L4", 2))
    }


def own_ports() -> dict[str, int]:
    """Ports for a node of its own: each node's dashboard agent binds 52365 unless told otherwise, so two nodes on
    one machine (another cluster's, a test process's beside) leave one agent without its HTTP service, and a head
    whose agent has none refuses every job ("No available agent to submit job")."""
    return {"dashboard_agent_listen_port": free_port()}


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


def start_secure_head(home: Path, temp_dir: Path) -> SecureHead:
    """The token made with `ray get-auth-token --generate` in ``home``/.ray/auth_token (0600), then `ray start
    --head` with RAY_AUTH_MODE=token from this virtualenv (a Ray job's `python` is the head's), its job API on every
    address, its files under ``temp_dir`` (every process of it names that directory: stop them by it)."""
    bin_dir = Path(sys.executable).parent
    ray_cli = str(bin_dir / "ray")
    # vLLM's cache stays where a node keeps it: in an empty one each replica's first start inspects the
    # model's class in a process of its own (about 20 s here), which a node pays once, not every test run.
    vllm_cache = os.environ.get("VLLM_CACHE_ROOT") or str(Path.home() / ".cache" / "vllm")
    env = ray_client_env(home) | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "VLLM_CACHE_ROOT": vllm_cache}
    subprocess.run(f"umask 077 && {ray_cli} get-auth-token --generate > /dev/null", shell=True, check=True, env=env,
                   timeout=60)  # fmt: skip
    dashboard_port = free_port()
    started = subprocess.run([ray_cli, "start", "--head", f"--port={free_port()}", f"--dashboard-port={dashboard_port}",
                              "--dashboard-host=0.0.0.0", "--num-cpus=2", "--disable-usage-stats",
                              f"--temp-dir={temp_dir}", f"--dashboard-agent-listen-port={free_port()}",
                              f"--ray-client-server-port={free_port()}"],
                             env=env | {"RAY_AUTH_MODE": "token"}, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    assert started.returncode == 0, started.stderr
    address = re.search(r"ray start --address='([^']+)'", started.stdout + started.stderr).group(1)
    return SecureHead(address, f"http://127.0.0.1:{dashboard_port}", home)
