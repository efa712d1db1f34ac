"""Cells of two replicas behind a router, each a real Ray Serve application on a local Ray cluster, with the fake
engine (its prefix cache of whole 16-word blocks) as each replica's server: through a sweep's driver and worker
actor, and a replica killed under a worker.

Serve's request router decides where each turn lands, so only a Serve application on a cluster (the shared
one) shows it; the fake engine stands in for vLLM because its prefix cache of whole blocks is all that the
routing checks read, and the real engine's caching is checked elsewhere."""

from __future__ import annotations

import os
import signal
import threading

import pandas as pd

from orchestrator.cell.spec import CellSpec, EngineKind
from orchestrator.records.cell import CellStatus
from orchestrator.records.layout import SweepFiles
from orchestrator.routing.rules import RouterKind
from orchestrator.sweep.planning.spec import EngineOptions, RunLimits
from orchestrator.sweep.runtime.driver import run_sweep
from orchestrator.sweep.runtime.worker import CellWorker
from orchestrator.workload.spec import WorkloadSpec
from tests.processes import FAKE_ENGINE_MODULE, wait_for_serving
from tests.sweep.conftest import fake_spec, options, summary

LIMITS = RunLimits(health_timeout_s=60, hang_timeout_s=20, poll_s=0.2, client_actors=0)


def routed_cell(router: RouterKind, duration_s: float = 3.0) -> CellSpec:
    workload = WorkloadSpec(jps=4, duration_s=duration_s, scale=0.05, tool_time_s=0.1, seed=7)
    return CellSpec(engine=EngineKind.FAKE, gpu="cpu", policy="fcfs", dram_gb=0, model="tiny", workload=workload,
                    engine_options=EngineOptions(), replicas=2, router=router)  # fmt: skip


def run(cell: CellSpec):
    worker = CellWorker()
    try:
        return worker.run(cell, LIMITS)
    finally:
        worker.shutdown()


def turns_moved(requests: pd.DataFrame) -> float:
    """The share of turns after a job's first that went to another replica than its previous turn."""
    ordered = requests.sort_values(["job_id", "turn"])
    previous = ordered.groupby("job_id").replica.shift()
    later = previous.notna()
    return float((ordered.replica[later] != previous[later]).mean())


def prefix_kept(requests: pd.DataFrame) -> float:
    later = requests[requests.turn > 0]
    return float(later.cached_tokens.sum() / later.best_cached_tokens.sum())


def test_a_sweep_keeps_each_job_on_its_replica_under_session_affinity_and_round_robin_moves_it(ray_cluster,
                                                                                               tmp_path):  # fmt: skip
    spec = fake_spec("routed", workload=routed_cell(RouterKind.ROUND_ROBIN).workload, replicas=(2,),
                     routers=(RouterKind.SESSION_AFFINITY, RouterKind.ROUND_ROBIN))  # fmt: skip
    assert run_sweep(spec, options(tmp_path, report=False)) == 0
    cells = summary(tmp_path, "routed").set_index("router")
    assert (cells.status == "done").all() and set(cells.replicas) == {2}
    files = SweepFiles(tmp_path / "routed")
    affine, rotated = (pd.read_parquet(files.cell(cells.cell_key[router]).requests)
                       for router in ("session-affinity", "round-robin"))  # fmt: skip
    assert (affine.status == "ok").all() and (rotated.status == "ok").all()
    assert set(rotated.replica) == {0, 1}  # session affinity may home every job on replica 0 when loads tie at 0
    # A job leaves its home only when the home has 5 requests more in flight than the other replica: not at this load.
    assert turns_moved(affine) <= 0.05 and cells.turns_moved_pct["session-affinity"] <= 5
    assert turns_moved(rotated) > 0.15  # about half; lower when few jobs interleave
    # The fake engine caches whole 16-word blocks: a job kept home finds all but its last partial block.
    assert prefix_kept(affine) > 0.9
    assert prefix_kept(rotated) < prefix_kept(affine)  # a moved turn finds at most its turn before last there
    assert "=== replica 1 ===" in files.cell(cells.cell_key["session-affinity"]).server_log.read_text()


def test_a_replica_dying_mid_cell_fails_the_cell_for_a_retry(ray_cluster):
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.update(result=run(routed_cell(RouterKind.ROUND_ROBIN, 6.0))))
    runner.start()
    # Killed once it has generated tokens, so into the load however long Serve took to start its replicas (a replica
    # set sends nothing before the load: no canary, no reset).
    engine = wait_for_serving(set(), FAKE_ENGINE_MODULE, lambda counters: counters.get("vllm:generation_tokens_total", 0) > 0,
                              timeout_s=120, ended=lambda: None if runner.is_alive() else "the cell ended first")  # fmt: skip
    os.kill(engine, signal.SIGKILL)
    runner.join(timeout=60)
    failed = outcome["result"]
    assert failed.status is CellStatus.FAILED and failed.retryable
    assert "of 2" in failed.reason and ("exited" in failed.reason or "replaced" in failed.reason), failed.reason
    assert failed.requests == ()  # nothing of a cell measured on one replica of two is kept
