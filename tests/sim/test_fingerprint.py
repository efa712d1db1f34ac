"""Refactoring guard: simulated cells of a fixed seed give the same requests, jobs and scheduler trace as
the stored fingerprint (``sim_fingerprint.json``), for every policy on a roomy and a small GPU at a light
and a saturating load (pins, reserve, preemption, CPU tiers and timeouts all happen in this set).

A cell's fingerprint is the sha256 of its trace's events as JSON lines (``records.scheduler_trace.trace_bytes``, the
format the trace had before it was stored as parquet) and of its two tables' contents (column names, dtypes and
every value); parquet bytes themselves also carry the writer's version, which a pyarrow upgrade changes without
any change of ours. Regenerate only for an intended change of behaviour, and say
why in the commit:  python -m tests.sim.test_fingerprint --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pandas as pd

from orchestrator.cell.spec import EngineKind
from orchestrator.policies.catalog import POLICIES
from orchestrator.records.cell import CellStatus
from orchestrator.records.scheduler_trace import trace_bytes
from orchestrator.records.scheduler_trace_file import trace_events
from orchestrator.records.store import records_frame
from orchestrator.sim.stacks import SOURCE_STUDY
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import RunLimits, SweepSpec
from orchestrator.sweep.runtime.worker import CellWorker
from orchestrator.workload.spec import WorkloadSpec

STORED = Path(__file__).with_name("sim_fingerprint.json")
SPEC = SweepSpec(
    name="fingerprint",
    engine=EngineKind.SIM,
    gpus=("H100", "L40S"),
    policies=tuple(POLICIES),
    jps=(3, 12),
    dram_gb=(32,),
    model="meta-llama/Llama-3.1-8B-Instruct",
    workload=WorkloadSpec(jps=1, duration_s=15, request_timeout_s=60, job_timeout_s=120),
    sim_stack=SOURCE_STUDY,  # the simulator as it was before engine stacks: this stack must give exactly that
)


def _table_digest(frame: pd.DataFrame) -> str:
    digest = hashlib.sha256(json.dumps([list(frame.columns), [str(t) for t in frame.dtypes]]).encode())
    digest.update(pd.util.hash_pandas_object(frame, index=False).values.tobytes())
    return digest.hexdigest()


def fingerprints() -> dict[str, dict[str, str]]:
    worker = CellWorker(node_id="fingerprint")
    try:
        found = {}
        for cell in expand(SPEC):
            outcome = worker.run(cell, RunLimits())
            assert outcome.status is CellStatus.DONE, (cell.label, outcome.reason)
            found[cell.label] = {
                "requests": _table_digest(records_frame(outcome.requests)),
                "jobs": _table_digest(records_frame(outcome.jobs)),
                "trace": hashlib.sha256(trace_bytes(trace_events(outcome.scheduler_trace))).hexdigest(),
            }
        return found
    finally:
        worker.shutdown()


def test_simulated_cells_match_the_stored_fingerprint():
    stored = json.loads(STORED.read_text())
    found = fingerprints()
    assert sorted(found) == sorted(stored)
    changed = {label: [part for part in found[label] if found[label][part] != stored[label][part]] for label in stored}
    assert not {label: parts for label, parts in changed.items() if parts}


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    STORED.write_text(json.dumps(fingerprints(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {STORED}")
