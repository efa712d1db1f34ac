"""Runs one cell end to end: start a replica, drive the planned workload at it, stop it, write the records.

Order matters for honesty: the plan is fully built before the server starts (nothing expensive happens
on the clock), and the records are written only after the server is gone and every job has an outcome.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.records.schema import JobRecord, RequestRecord
from orchestrator.records.store import atomic_write_json, write_cell_records
from orchestrator.records.summary import CellSummary, summarize
from orchestrator.replica.probe import EngineFacts
from orchestrator.replica.replica import Replica
from orchestrator.replica.vllm_server import VllmEngineConfig
from orchestrator.workload.actor import drive_in_process, drive_with_actors
from orchestrator.workload.client import RequestOptions
from orchestrator.workload.plan import WorkloadPlan

CELL_FILE = "cell.json"


@dataclass(frozen=True)
class CellResult:
    requests: tuple[RequestRecord, ...]
    jobs: tuple[JobRecord, ...]
    summary: CellSummary
    engine_facts: EngineFacts
    wall_s: float


def run_cell(
    engine: VllmEngineConfig,
    plan: WorkloadPlan,
    out_dir: Path,
    options: RequestOptions,
    num_client_actors: int = 0,
    health_timeout_s: float = 300.0,
) -> CellResult:
    """Run ``plan`` against a fresh replica of ``engine``; records, server log, scheduler trace and
    ``cell.json`` (requested and effective configuration) land in ``out_dir``.

    ``num_client_actors`` = 0 drives the load from this process; more splits the jobs over Ray actors
    (Ray must be initialised by the caller).
    """
    out_dir = Path(out_dir).absolute()
    started = time.monotonic()
    replica = Replica(engine, out_dir, health_timeout_s)
    info = replica.start()
    try:
        if num_client_actors:
            shard = drive_with_actors(plan, info.base_url, options, num_client_actors)
        else:
            shard = drive_in_process(plan, info.base_url, options)
    finally:
        replica.stop()
    summary = summarize(shard.requests, shard.jobs)
    write_cell_records(out_dir, shard.requests, shard.jobs)
    atomic_write_json(
        {
            "engine": engine.model_dump(mode="json"),
            "workload": plan.spec.model_dump(mode="json"),
            "request_options": asdict(options),
            "plan_fingerprint": plan.fingerprint(),
            "server_argv": list(info.server_argv),
            "server_env": info.server_env,
            "engine_facts": info.facts.as_dict(),
        },
        out_dir / CELL_FILE,
    )
    return CellResult(shard.requests, shard.jobs, summary, info.facts, wall_s=time.monotonic() - started)
