"""The faults a GPU fleet hands out, each injected into a real sweep of the fake engine: a node killed under a running
cell (a preempted spot GPU), the tracking server stopped mid-sweep (a shared server restarted), and the results disk
filling up. The nodes that die are nodes of declared GPUs that join this test process's shared cluster for the test;
the node killing and the ledger audit are ``benchmarks/chaos.py``'s, which runs them at scale."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from benchmarks.chaos import add_gpu_node, audit, kill_node, nodes_serving_a_cell
from orchestrator.records.cell import CellStatus, FailureKind
from orchestrator.records.layout import SweepFiles
from orchestrator.replica.server import free_port
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.runtime.driver import EXIT_STOPPED, run_sweep
from orchestrator.sweep.runtime.tracking import default_tracking_uri
from tests.clusters import TEST_NODE
from tests.sweep.conftest import fake_spec, options, runs_by_key, summary


def _keys(spec) -> list[str]:
    return [cell.key for cell in expand(spec)]


def _when(condition, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the sweep never got there"
        time.sleep(0.1)


def _in_thread(action) -> threading.Thread:
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    return thread


def test_a_node_lost_under_a_running_cell_costs_no_attempt_its_cell_is_done_elsewhere_and_with_none_left_pends(
    ray_cluster, tmp_path
):
    """Three cells on two B200 nodes, one attempt allowed each. The node under one of the first two cells is killed
    (raylet and all): that cell is retried all the same, on the other node once it is free, and done, its lost attempt
    tracked with the node named. Then the last B200 node dies under the third cell: no node of the type is left, none
    joins within the wait, and the cell pends with the reason."""
    cluster = ray_cluster.cluster
    add_gpu_node(cluster, "B200", **TEST_NODE), add_gpu_node(cluster, "B200", **TEST_NODE)
    uri = default_tracking_uri(tmp_path)
    killed = []

    def kill_the_node_under_a_cell(runs_started: int):
        _when(lambda: (tmp_path / "mlflow.db").exists() and _cell_runs(uri, "preempted") >= runs_started)
        _when(lambda: len(nodes_serving_a_cell(cluster)) == 3 - runs_started // 2)
        time.sleep(0.3)  # its load has started
        killed.append(nodes_serving_a_cell(cluster)[0])
        kill_node(cluster, killed[-1])

    one_try = fake_spec("t").limits.model_copy(update={"max_attempts": 1})
    # The earlier-started cell's node is killed as soon as both run: the other runs on for seconds after the loss is
    # seen (about 2 s), so the lost cell's retry is first in the queue when that node frees.
    workload = fake_spec("t").workload.model_copy(update={"duration_s": 4})
    spec = fake_spec("preempted", gpus=("B200",), jps=(2, 3, 5), limits=one_try, workload=workload)
    # Runs 1 and 2 are the first two cells on both nodes; run 3 the retry, run 4 the third cell, on the last node.
    killer = _in_thread(lambda: (kill_the_node_under_a_cell(2), kill_the_node_under_a_cell(4)))
    assert run_sweep(spec, options(tmp_path, report=False, scale_up_timeout_s=1)) == 0  # pending: partial, not failed
    killer.join()
    runs = runs_by_key(tmp_path, "preempted")
    first, second, third = _keys(spec)
    victim, spared = (first, second) if runs[first][0].status is CellStatus.FAILED else (second, first)
    assert [(run.attempt, run.status) for run in runs[victim]] == [(1, CellStatus.FAILED), (2, CellStatus.DONE)]
    assert [run.status for run in runs[spared]] == [CellStatus.DONE]
    assert [run.status for run in runs[third]] == [CellStatus.FAILED]
    client = MlflowClient(uri)
    for key, node in ((victim, killed[0]), (third, killed[1])):
        tags = client.get_run(runs[key][0].run_id).data.tags
        assert tags["reason"].startswith(f"node {node.node_id[:8]} (") and " lost mid-cell: " in tags["reason"]
        assert tags["failure"] == FailureKind.NODE_LOST.value
    rows = summary(tmp_path, "preempted").set_index("cell_key")
    assert rows.loc[victim, "status"] == "done" and rows.loc[victim, "node_id"] == killed[1].node_id
    assert rows.loc[third, "status"] == "pending" and rows.loc[third, "reason"].startswith("every B200 node was lost (")
    assert all(f"node {node.node_id[:8]} (" in rows.loc[third, "reason"] for node in killed)
    assert rows.loc[third, "reason"].endswith("and none joined within 1 s (--scale-up-timeout-s)")
    result = audit(tmp_path, "preempted", uri, [victim, spared])
    assert result.clean and result.attempts_lost_with_nodes == 2


@pytest.fixture
def tracking_server(tmp_path):
    """MLflow's tracking server application (the one `mlflow server` serves, artifacts proxied) on a loopback port,
    run in this process so that stopping and starting it takes milliseconds, where a server process takes about 10 s
    to start here (benchmarks/chaos.py restarts a real one). ``start()`` and ``stop()`` it; its URI."""
    from werkzeug.serving import make_server

    store = tmp_path / "server"
    os.environ |= {"_MLFLOW_SERVER_FILE_STORE": f"sqlite:///{store}/mlflow.db", "_MLFLOW_SERVER_SERVE_ARTIFACTS": "true",
                   "_MLFLOW_SERVER_ARTIFACT_ROOT": "mlflow-artifacts:/",
                   "_MLFLOW_SERVER_ARTIFACT_DESTINATION": str(store / "artifacts")}  # fmt: skip
    store.mkdir()
    from mlflow.server import app

    class Server:
        port = free_port()
        uri = f"http://127.0.0.1:{port}"
        _running = None

        def start(self):
            self._running = make_server("127.0.0.1", self.port, app, threaded=True)
            threading.Thread(target=self._running.serve_forever, daemon=True).start()

        def stop(self):
            if self._running is not None:
                self._running.shutdown()
                self._running.server_close()
                self._running = None

    server = Server()
    server.start()
    yield server
    server.stop()


def _cell_runs(uri: str, sweep: str) -> int:
    """The cell attempts whose start is wholly tracked (the run and its params): the driver writes no more to the
    store until the attempt ends, so a fault injected now meets that attempt's end, not its start."""
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(sweep)
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'cell'") if experiment else []
    return sum(bool(run.data.params) for run in runs)


def test_a_tracking_outage_is_waited_out_and_past_its_patience_stops_the_sweep_with_every_finished_cell_on_disk(
    tracking_server, tmp_path, capsys
):
    """Two cells, a patience of 3 s. The server stops while the first cell runs and starts again 0.5 s after that
    cell's files are on disk: the sweep waited and went on, no attempt charged. It stops again while the second cell
    runs, for good: the cell finishes onto disk, and past the patience the sweep stops in one line. The re-run, the
    server back, logs that cell from its files without running it again."""
    uri = tracking_server.uri
    spec = fake_spec("outage", jps=(2, 3))
    files = SweepFiles(tmp_path / "outage")
    first, second = _keys(spec)

    def outages():
        _when(lambda: _cell_runs(uri, "outage") >= 1)
        tracking_server.stop()
        _when(lambda: files.cell(first).directory.exists())  # its tracking is what waits now
        time.sleep(0.5)
        tracking_server.start()
        _when(lambda: _cell_runs(uri, "outage") >= 2)
        tracking_server.stop()

    injector = _in_thread(outages)
    code = run_sweep(spec, options(tmp_path, tracking_uri=uri, report=False, tracking_patience_s=3))
    injector.join()
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "stopped:" in line]
    assert f"tracking store at {uri} not answering" in out and "done cpu fcfs jps=2 " in out
    assert code == EXIT_STOPPED and f"stopped: the tracking store at {uri} did not answer for " in line
    assert "2/2 cells are done and complete in" in line and line.endswith("not run again")
    assert list(summary(tmp_path, "outage").status) == ["done", "done"]  # the disk's truth, MLflow not yet told
    on_disk = {key: files.cell(key).summary.read_text() for key in (first, second)}
    tracking_server.start()
    assert run_sweep(spec, options(tmp_path, tracking_uri=uri, report=False)) == 0
    assert f"logged 1 cells a previous run finished on disk but could not track (not run again): {second}" in (
        capsys.readouterr().out
    )
    assert {key: files.cell(key).summary.read_text() for key in (first, second)} == on_disk
    result = audit(tmp_path, "outage", uri, [first, second])
    assert result.clean and result.attempts == 2


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs to hold a sweep's results and tracking store, and a way to fill it; mounting needs root (or
    CAP_SYS_ADMIN), which this project's machines and CI have: without it the test fails, saying so."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True, text=True)
    if mounted.returncode:
        pytest.fail(f"cannot mount a size-limited tmpfs here (root or CAP_SYS_ADMIN needed): {mounted.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def _fill(directory: Path) -> Path:
    """Write a file until the disk under ``directory`` has no space left."""
    ballast = directory / "ballast"
    with open(ballast, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 2**20)
                handle.flush()
        except OSError:
            pass
    return ballast


def test_a_full_results_disk_stops_the_sweep_in_one_line_with_nothing_half_written_marked_done(small_disk, capsys):
    """Results and tracking store on a small disk that fills while the second of two cells runs: its files cannot be
    written, nothing of it is left staged or in place, the first cell stands complete, and the sweep stops in one
    line. With space freed, the re-run does the second cell and leaves the first alone."""
    spec = fake_spec("full", jps=(2, 3))
    uri = default_tracking_uri(small_disk)
    filled = []

    def fill_once_the_second_cell_runs():
        _when(lambda: (small_disk / "full" / "cells").exists())  # the store exists: reading it creates nothing
        _when(lambda: _cell_runs(uri, "full") >= 2)
        filled.append(_fill(small_disk))

    injector = _in_thread(fill_once_the_second_cell_runs)
    code = run_sweep(spec, options(small_disk, report=False))
    injector.join()
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "stopped:" in line]
    assert code == EXIT_STOPPED and f"stopped: the disk holding {small_disk / 'full'} is full (" in line
    assert "while writing the files of cpu fcfs jps=3 " in line and "1/2 cells are done" in line
    assert line.endswith("free space there and re-run the same command: it runs only the cells not done")
    files = SweepFiles(small_disk / "full")
    first, second = _keys(spec)
    assert files.cell(first).summary.exists() and not files.cell(second).directory.exists()
    assert not files.staging.exists() or not any(files.staging.iterdir())
    filled[0].unlink()
    first_run = runs_by_key(small_disk, "full")[first]
    assert run_sweep(spec, options(small_disk, report=False)) == 0
    runs = runs_by_key(small_disk, "full")
    assert runs[first] == first_run  # not run again
    assert [run.status for run in runs[second]] == [CellStatus.INTERRUPTED, CellStatus.DONE]
    assert audit(small_disk, "full", uri, [first, second]).clean
