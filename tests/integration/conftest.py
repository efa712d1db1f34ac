"""A real CPU replica that modules of one xdist group share: the tiny model, fcfs, a pool of ``NUM_BLOCKS`` blocks."""

from __future__ import annotations

import pytest

from orchestrator.sweep.planning.spec import EngineOptions, RunLimits
from orchestrator.sweep.runtime.worker import CellWorker

# Modules marked with this group run one after another in one test process, so the replica starts once for them.
TINY_FCFS_GROUP = pytest.mark.xdist_group("tiny-fcfs-replica")
NUM_BLOCKS = 1200
TINY_FCFS_OPTIONS = EngineOptions(num_kv_blocks=NUM_BLOCKS)
LIMITS = RunLimits(health_timeout_s=300, hang_timeout_s=120, client_actors=0)


@pytest.fixture(scope="session")
def tiny_fcfs_worker():
    """One worker for every cell of the tiny model under fcfs with ``TINY_FCFS_OPTIONS``: they share the engine
    configuration, so they share its replica (reset and proven clean between cells)."""
    worker = CellWorker()
    yield worker
    worker.shutdown()
