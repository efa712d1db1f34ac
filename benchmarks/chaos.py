"""Does a sweep survive the faults a GPU fleet hands out? A fake-engine sweep on a fake GPU cluster runs while a
background loop kills a node with a replica on it every so often (a preempted spot GPU: its raylet and every
process on it die at once) and a replacement joins a few seconds later, and the MLflow tracking server (a real
``mlflow server`` process) is stopped once mid-sweep and started again. Then the ledger is checked: every cell done
exactly once (one ``done`` run in MLflow, one row in ``summary.parquet``, its directory naming that run), none lost,
none counted twice.

The GPUs are declared resources of local Ray nodes (this machine has none) and the engine is the fake one: the
faults are the cluster's and the tracking server's, which is what is under test, not an engine.

    python benchmarks/chaos.py [--cells 50] [--nodes 4] [--kills 6] [--kill-every-s 8] [--replace-after-s 3]
                               [--outage-at-s 30] [--outage-s 5] [--seed 0] [--keep DIR]

Prints the faults injected and survived as a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.cell.spec import EngineKind
from orchestrator.records.cell import CellStatus, FailureKind
from orchestrator.records.layout import SweepFiles
from orchestrator.records.names import read_summary
from orchestrator.replica.server import free_port
from orchestrator.sweep.planning.options import SweepOptions
from orchestrator.sweep.planning.spec import RunLimits, SweepSpec
from orchestrator.workload.spec import WorkloadSpec

GPU = "H100"
FAKE_ENGINE_MODULE = "orchestrator.replica.fake_engine"
SWEEP = "chaos"
GB = 10**9


# -- the faults ------------------------------------------------------------------------------------------------


def add_gpu_node(cluster, gpu: str = GPU, memory_gb: float = 2, num_gpus: int = 1, **node_args):
    """A node of ``num_gpus`` declared GPUs of type ``gpu`` joining ``cluster`` (a ``ray.cluster_utils.Cluster``), with
    an agent port of its own (two agents on one port leave one without its HTTP service); ``node_args``: Ray's other
    node settings."""
    return cluster.add_node(num_cpus=1, num_gpus=num_gpus, memory=int(memory_gb * GB),
                            resources={f"accelerator_type:{gpu}": 1}, dashboard_agent_listen_port=free_port(),
                            **node_args)  # fmt: skip


def nodes_serving_a_cell(cluster) -> list:
    """The worker nodes of ``cluster`` on which a fake engine runs now, in the order their engines started: a cell is
    mid-run there, or its replica waits for the next cell of its configuration. A server inherits its worker's
    RAY_RAYLET_PID, which names the node."""
    by_raylet = {node.all_processes["raylet"][0].process.pid: node for node in cluster.worker_nodes
                 if getattr(node, "all_processes", None)}  # fmt: skip
    serving = []
    for entry in sorted((entry for entry in Path("/proc").iterdir() if entry.name.isdigit()), key=_started):
        try:
            if FAKE_ENGINE_MODULE not in (entry / "cmdline").read_bytes().decode(errors="replace"):
                continue
            environ = dict(item.split("=", 1) for item in (entry / "environ").read_text(errors="replace").split("\0") if "=" in item)
        except OSError:
            continue
        node = by_raylet.get(int(environ.get("RAY_RAYLET_PID", 0)))
        if node is not None and node not in serving:
            serving.append(node)
    return serving


def _started(entry: Path) -> int:
    """When a process started, in clock ticks since boot (0 for one that is gone)."""
    try:
        return int((entry / "stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def kill_node(cluster, node) -> None:
    """The node's raylet and every process of it killed at once, as a preempted VM goes."""
    cluster.remove_node(node, allow_graceful=False)


class MlflowServer:
    """A real ``mlflow server`` on loopback over a sqlite store in ``directory``, which can be stopped and started
    again on the same port (a shared server restarted)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 120.0) -> float:
        """Start it and wait for ``/health``; the seconds it took."""
        started = time.monotonic()
        mlflow = Path(sys.executable).parent / "mlflow"
        self._process = subprocess.Popen(
            [str(mlflow), "server", "--backend-store-uri", f"sqlite:///{self.directory / 'mlflow.db'}",
             "--artifacts-destination", str(self.directory / "artifacts"), "--host", "127.0.0.1", "--port",
             str(self.port), "--workers", "1"],
            stdout=open(self.directory / "server.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        while time.monotonic() - started < timeout_s:
            try:
                with urllib.request.urlopen(self.uri + "/health", timeout=2) as response:
                    if response.status == 200:
                        return time.monotonic() - started
            except OSError:
                time.sleep(0.25)
        raise TimeoutError(f"mlflow server did not answer on {self.uri} within {timeout_s:g} s")

    def stop(self) -> None:
        if self._process is not None:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
            self._process = None


# -- the ledger ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Audit:
    """What a sweep's ledger says of its cells after the faults."""

    cells: int
    done_once: int  # one done run in MLflow, one done row in summary.parquet, and the cell's directory names that run
    lost: int  # cells of the grid with no done run
    counted_twice: int  # cells with more than one done run or more than one row
    attempts: int  # every attempt tracked, the failed ones included
    attempts_lost_with_nodes: int  # attempts that ended because their node left the cluster

    @property
    def clean(self) -> bool:
        return self.done_once == self.cells and not self.lost and not self.counted_twice


def audit(results_dir: Path, sweep: str, tracking_uri: str, cell_keys: list[str]) -> Audit:
    """Every cell of ``cell_keys`` checked against MLflow, ``summary.parquet`` and the cells' directories."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(sweep)
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'cell'", max_results=50_000)
    done = {}
    done_runs = Counter()
    for run in runs:
        if run.data.tags["status"] == CellStatus.DONE.value:
            done_runs[run.data.tags["cell_key"]] += 1
            done[run.data.tags["cell_key"]] = run.info.run_id
    files = SweepFiles(results_dir / sweep)
    rows = read_summary(files.summary)
    row_counts = Counter(rows.cell_key)
    done_once = 0
    for key in cell_keys:
        on_disk = json.loads(files.cell(key).summary.read_text())["row"] if files.cell(key).summary.exists() else {}
        row = rows[rows.cell_key == key]
        done_once += (done_runs[key] == 1 and row_counts[key] == 1 and (row.status == "done").all()
                      and on_disk.get("run_id") == done[key] == row.run_id.iloc[0])  # fmt: skip
    return Audit(
        cells=len(cell_keys),
        done_once=done_once,
        lost=sum(not done_runs[key] for key in cell_keys),
        counted_twice=sum(done_runs[key] > 1 or row_counts[key] > 1 for key in cell_keys),
        attempts=len(runs),
        attempts_lost_with_nodes=sum(run.data.tags.get("failure") == FailureKind.NODE_LOST.value for run in runs),
    )


# -- the run ---------------------------------------------------------------------------------------------------


def chaos_spec(num_cells: int) -> SweepSpec:
    """``num_cells`` fake-engine cells of one GPU type, a load level each, short: the faults are what is measured."""
    return SweepSpec(
        name=SWEEP, engine=EngineKind.FAKE, gpus=(GPU,), policies=("fcfs",), dram_gb=(1,),
        jps=tuple(1 + 0.25 * index for index in range(num_cells)),
        workload=WorkloadSpec(jps=1, duration_s=2, scale=0.05, tool_time_s=0.1),
        limits=RunLimits(health_timeout_s=60, hang_timeout_s=20, poll_s=0.2, client_actors=0),
    )  # fmt: skip


@dataclass
class Faults:
    nodes_killed: int = 0
    nodes_added: int = 0
    tracking_restarts: int = 0
    tracking_down_s: float = 0.0


class Monkey:
    """The fault loop, ticked from the main thread (Ray adds a node only there): a node with a replica on it killed
    every ``kill_every_s`` (jittered), a replacement added ``replace_after_s`` later; the tracking server stopped once
    at ``outage_at_s`` for ``outage_s``, then started again on its port."""

    def __init__(self, cluster, server: MlflowServer, args):
        self.cluster, self.server, self.args = cluster, server, args
        self.faults = Faults()
        self._rng = random.Random(args.seed)
        self._started = time.monotonic()
        self._next_kill = self._started + args.kill_every_s * self._rng.uniform(0.7, 1.3)
        self._replacements: list[float] = []
        self._outage_done = False

    def tick(self) -> None:
        args, faults, now = self.args, self.faults, time.monotonic()
        if not self._outage_done and now - self._started >= args.outage_at_s:
            self.server.stop()
            time.sleep(args.outage_s)
            faults.tracking_down_s = args.outage_s + self.server.start()
            faults.tracking_restarts += 1
            self._outage_done = True
            print(f"chaos: tracking server down for {faults.tracking_down_s:.0f} s, back", flush=True)
        if faults.nodes_killed < args.kills and now >= self._next_kill and (serving := nodes_serving_a_cell(self.cluster)):
            victim = self._rng.choice(serving)
            kill_node(self.cluster, victim)
            faults.nodes_killed += 1
            self._replacements.append(now + args.replace_after_s)
            self._next_kill = now + args.kill_every_s * self._rng.uniform(0.7, 1.3)
            print(f"chaos: killed node {victim.node_id[:8]} mid-cell", flush=True)
        for due in [due for due in self._replacements if now >= due]:
            self._replacements.remove(due)
            add_gpu_node(self.cluster)
            faults.nodes_added += 1


def drive(args) -> int:
    """The sweep's driver, in a process of its own as a user's is: the monkey cannot take it down with a node."""
    from orchestrator.sweep.runtime.driver import run_sweep

    options = SweepOptions(results_dir=args.results_dir, tracking_uri=args.tracking_uri, ray_address=args.ray_address,
                           live=False, progress_interval_s=30, report=False, scale_up_timeout_s=120)  # fmt: skip
    return run_sweep(chaos_spec(args.cells), options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=50)
    parser.add_argument("--nodes", type=int, default=4, help=f"{GPU} nodes of one GPU each at the start")
    parser.add_argument("--kills", type=int, default=6, help="nodes killed, each with a replica on it")
    parser.add_argument("--kill-every-s", type=float, default=8.0)
    parser.add_argument("--replace-after-s", type=float, default=3.0, help="a new node joins this long after a kill")
    parser.add_argument("--outage-at-s", type=float, default=30.0, help="when the tracking server is stopped")
    parser.add_argument("--outage-s", type=float, default=5.0, help="how long it stays stopped (its start adds more)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="keep the results, the tracking store and the driver's log here")
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)  # the sweep's own process
    parser.add_argument("--ray-address", help=argparse.SUPPRESS)
    parser.add_argument("--tracking-uri", help=argparse.SUPPRESS)
    parser.add_argument("--results-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for flag in ("cells", "nodes"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be at least 1, got {getattr(args, flag)}")
    if args.driver:
        return drive(args)

    from ray.cluster_utils import Cluster

    from orchestrator.sweep.planning.cells import expand

    work = args.keep or Path(tempfile.mkdtemp(prefix="kvsweep-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "dashboard_agent_listen_port": free_port()})  # fmt: skip
    server = MlflowServer(work)
    results_dir = work / "results"
    try:
        for _ in range(args.nodes):
            add_gpu_node(cluster)
        first_start_s = server.start()
        print(f"chaos: {args.cells} cells on {args.nodes} {GPU} nodes, mlflow server up in {first_start_s:.1f} s; "
              f"the driver's log: {work / 'driver.log'}", flush=True)  # fmt: skip
        monkey = Monkey(cluster, server, args)
        started = time.monotonic()
        with open(work / "driver.log", "w") as log:
            driver = subprocess.Popen([sys.executable, __file__, "--driver", "--cells", str(args.cells),
                                       "--ray-address", cluster.address, "--tracking-uri", server.uri,
                                       "--results-dir", str(results_dir)], stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
            try:
                while driver.poll() is None:
                    monkey.tick()
                    time.sleep(0.25)
            finally:
                if driver.poll() is None:  # stopped early: the driver goes first, as a user's SIGTERM would take it
                    driver.terminate()
                    driver.wait()
        wall_s = time.monotonic() - started
        result = audit(results_dir, SWEEP, server.uri, [cell.key for cell in expand(chaos_spec(args.cells))])
    finally:
        server.stop()
        cluster.shutdown()
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print_table(monkey.faults, result, wall_s, driver.returncode)
    print(json.dumps({"exit_code": driver.returncode, "wall_s": round(wall_s, 1), **asdict(monkey.faults), **asdict(result)}))
    return 0 if driver.returncode == 0 and result.clean else 1


def print_table(faults: Faults, result: Audit, wall_s: float, code: int) -> None:
    rows = [
        ("nodes killed with a replica on them", faults.nodes_killed),
        ("replacement nodes joined", faults.nodes_added),
        ("attempts lost with their node, retried", result.attempts_lost_with_nodes),
        (f"tracking server restarts (down {faults.tracking_down_s:.0f} s)", faults.tracking_restarts),
        ("cells", result.cells),
        ("cells done exactly once", result.done_once),
        ("cells lost", result.lost),
        ("cells counted twice", result.counted_twice),
        ("attempts tracked", result.attempts),
        ("sweep exit code", code),
        ("wall time", f"{wall_s:.0f} s"),
    ]
    print("\n| | |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    sys.exit(main())
