"""Tensor-parallel cells on 8-GPU nodes of two types, joined to the shared cluster for this module and taken out
after it (the other modules expect those types absent or their own): TP-1 and TP-4 cells of one sweep packed onto
one node at once, each TP-4 replica on four GPUs that no cell beside it held; on the other node the gangs of a TP-4
replica talked to directly, through Ray Serve, and routed over two replicas; and cells wider than any node of their
type refused before anything starts."""

from __future__ import annotations

import time

import pandas as pd
import pytest
import ray

from benchmarks.chaos import add_gpu_node
from orchestrator.inputs.validation import InputError
from orchestrator.models.served import Weights
from orchestrator.records.layout import SweepFiles
from orchestrator.sweep.runtime.driver import run_sweep
from tests.clusters import TEST_NODE
from tests.sweep.conftest import fake_spec, options, summary

TYPES = ("H200", "B200")
MODEL = "llama-3.1-70b"
GPUS_PER_NODE = 8


@pytest.fixture(scope="module")
def eight_gpu_nodes(ray_cluster):
    """One node of eight declared GPUs of each type; removed afterwards, and waited for until Ray lists them dead."""
    cluster = ray_cluster.cluster
    nodes = [add_gpu_node(cluster, gpu, memory_gb=16, num_gpus=GPUS_PER_NODE, **TEST_NODE) for gpu in TYPES]
    yield {gpu: node.node_id for gpu, node in zip(TYPES, nodes)}
    for node in nodes:
        cluster.remove_node(node)
    gone = {node.node_id for node in nodes}
    deadline = time.monotonic() + 60
    while any(n["NodeID"] in gone and n["Alive"] for n in ray.nodes()) and time.monotonic() < deadline:
        time.sleep(0.5)


def test_tp_1_and_tp_4_cells_pack_onto_an_8_gpu_node_never_holding_more_gpus_than_it_has(eight_gpu_nodes, tmp_path):
    """Two TP-1 and two TP-4 cells on one node of 8: the queue runs them all there; every TP-4 replica's worker
    held four distinct GPUs, and cells that overlapped in time never shared a GPU nor held more than 8 at once."""
    workload = fake_spec("t").workload.model_copy(update={"duration_s": 3})
    spec = fake_spec("packed", gpus=("H200",), tp=(1, 4), jps=(2, 3), model=MODEL, weights=Weights.DUMMY,
                     workload=workload)  # fmt: skip
    assert run_sweep(spec, options(tmp_path, report=False)) == 0
    rows = summary(tmp_path, "packed")
    assert len(rows) == 4 and set(rows.status) == {"done"} and (rows.num_completed == rows.num_jobs).all()
    assert set(rows.node_id) == {eight_gpu_nodes["H200"]}
    for row in rows.itertuples():
        gpus = row.gpu_ids.split(",")
        assert len(set(gpus)) == len(gpus) == row.tp, f"a TP-{row.tp} cell held GPUs {row.gpu_ids}"
    for moment in rows.started_unix:
        running = rows[(rows.started_unix <= moment) & (rows.finished_unix > moment)]
        held = [gpu for ids in running.gpu_ids for gpu in ids.split(",")]
        assert len(held) == len(set(held)) <= GPUS_PER_NODE, f"at {moment}: {list(running.gpu_ids)}"


def test_gangs_of_four_and_eight_take_a_node_and_give_its_workers_back(eight_gpu_nodes, tmp_path):
    """On one node of 8, three TP-4 cells: talked to directly (a worker holds four GPUs), through Serve with one
    replica (four workers step aside for it), and routed over two replicas, which takes all eight workers: it starts
    only once both others are done and their workers are back. Serve could place no replica on a GPU a worker still
    held."""
    spec = fake_spec("gangs", gpus=("B200",), tp=(4,), replicas=(1, 2), routers=("round-robin",), serve_overhead=True,
                     model=MODEL, weights=Weights.DUMMY)  # fmt: skip
    assert run_sweep(spec, options(tmp_path, report=False)) == 0
    rows = summary(tmp_path, "gangs")
    assert list(rows.status) == ["done"] * 3 and (rows.num_completed == rows.num_jobs).all() and set(rows.tp) == {4}
    assert set(rows.node_id) == {eight_gpu_nodes["B200"]}
    direct = rows[rows.router.isna()].iloc[0]
    assert len(set(direct.gpu_ids.split(","))) == 4  # a routed cell's coordinator holds none: its replicas do
    pair = rows[rows.replicas == 2].iloc[0]
    assert pair.started_unix >= rows[rows.replicas == 1].finished_unix.max()
    requests = pd.read_parquet(SweepFiles(tmp_path / "gangs").cell(pair.cell_key).requests)
    assert set(requests.replica) == {0, 1}
    # One actor per gang and none besides: the node's eight workers stayed asleep (no cell of one GPU came), the pair's
    # gang took the workers the first two gave back as they were, and none was started at the end.
    assert len(_cell_worker_actors(eight_gpu_nodes["B200"])) == 3


def _cell_worker_actors(node_id: str) -> list[dict]:
    """Every cell-worker actor made on ``node_id``, alive or ended, as Ray's control store lists them."""
    from ray._private.state import actors

    return [actor for actor in actors().values()
            if actor["ActorClassName"] == "CellWorker" and actor["Address"]["NodeID"] == node_id]  # fmt: skip


def test_a_cell_wider_than_its_types_nodes_is_refused_before_anything_starts(fake_gpu_nodes, tmp_path):
    """The L4 node has 2 GPUs: a replica of 4 cannot be placed, nor 3 replicas of one GPU at once."""
    spec = fake_spec("too-wide", gpus=("L4",), tp=(4,), model=MODEL, weights=Weights.DUMMY)
    with pytest.raises(InputError, match=r"^a tensor-parallel replica of 4 L4 GPUs needs them on one node, and no L4 "
                                         r"node up or launchable gives more than 2 slot\(s\); valid: --tp up to 2$"):
        run_sweep(spec, options(tmp_path, report=False))
    spec = fake_spec("too-many", gpus=("L4",), replicas=(3,), routers=("round-robin",))
    with pytest.raises(InputError, match="a cell of 3 replicas needs 3 L4 GPUs at once; the cluster has 2 L4 "
                                         "slot\\(s\\) up and can launch 0 more; valid: --replicas up to 2"):  # fmt: skip
        run_sweep(spec, options(tmp_path, report=False))
    assert not (tmp_path / "too-wide").exists() or not any((tmp_path / "too-wide").rglob("cell.json"))
