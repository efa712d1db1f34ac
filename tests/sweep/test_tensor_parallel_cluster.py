"""Tensor-parallel cells on 8-GPU nodes of two types, joined to the shared cluster for this module and taken out
after it (the other modules expect those types absent or their own): TP-1 and TP-4 cells of one sweep packed onto
the nodes at once, each TP-4 replica on four GPUs of one node that no cell beside it held."""

from __future__ import annotations

import time

import pytest
import ray

from benchmarks.chaos import add_gpu_node
from orchestrator.models.served import Weights
from orchestrator.sweep.runtime.driver import run_sweep
from tests.sweep.conftest import fake_spec, options, summary

TYPES = ("H200", "B200")
GPUS_PER_NODE = 8


@pytest.fixture(scope="module")
def eight_gpu_nodes(ray_cluster):
    """One node of eight declared GPUs of each type; removed afterwards, and waited for until Ray lists them dead."""
    cluster = ray_cluster.cluster
    nodes = [add_gpu_node(cluster, gpu, memory_gb=16, num_gpus=GPUS_PER_NODE) for gpu in TYPES]
    yield {gpu: node.node_id for gpu, node in zip(TYPES, nodes)}
    for node in nodes:
        cluster.remove_node(node)
    gone = {node.node_id for node in nodes}
    deadline = time.monotonic() + 60
    while any(n["NodeID"] in gone and n["Alive"] for n in ray.nodes()) and time.monotonic() < deadline:
        time.sleep(0.5)


def test_tp_1_and_tp_4_cells_pack_onto_8_gpu_nodes_never_holding_more_gpus_than_a_node_has(eight_gpu_nodes, tmp_path):
    """Per type three TP-1 and three TP-4 cells on one node of 8: the queue runs them all, each on its type's node;
    every TP-4 replica's worker held four distinct GPUs, and cells that overlapped in time never shared a GPU nor held
    more than 8 at once."""
    workload = fake_spec("t").workload.model_copy(update={"duration_s": 3})
    spec = fake_spec("packed", gpus=TYPES, tp=(1, 4), jps=(2, 3, 5), model="llama-3.1-70b", weights=Weights.DUMMY,
                     workload=workload)  # fmt: skip
    assert run_sweep(spec, options(tmp_path, report=False)) == 0
    rows = summary(tmp_path, "packed")
    assert len(rows) == 12 and set(rows.status) == {"done"} and (rows.n_completed == rows.n_jobs).all()
    for row in rows.itertuples():
        assert row.node_id == eight_gpu_nodes[row.gpu], f"a {row.gpu} cell ran on another node"
        gpus = row.gpu_ids.split(",")
        assert len(set(gpus)) == len(gpus) == row.tp, f"a TP-{row.tp} cell held GPUs {row.gpu_ids}"
    for gpu in TYPES:
        cells = rows[rows.gpu == gpu]
        for moment in cells.started_unix:
            running = cells[(cells.started_unix <= moment) & (cells.finished_unix > moment)]
            held = [g for ids in running.gpu_ids for g in ids.split(",")]
            assert len(held) == len(set(held)) <= GPUS_PER_NODE, f"{gpu} at {moment}: {list(running.gpu_ids)}"
