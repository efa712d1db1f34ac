from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

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
