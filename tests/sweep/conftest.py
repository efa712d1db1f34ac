from __future__ import annotations

from pathlib import Path

import pandas as pd

from orchestrator.cell.spec import EngineKind
from orchestrator.sweep.planning.options import SweepOptions
from orchestrator.sweep.planning.spec import RunLimits, SweepSpec
from orchestrator.sweep.runtime.tracking import SweepTracker, default_tracking_uri
from orchestrator.workload.spec import WorkloadSpec


def fake_spec(name: str, **overrides) -> SweepSpec:
    """A sweep on the fake engine (no model) with short tool times and the load generated in the worker (a
    load-generator actor costs each cell a process start): fast, so the orchestration is what is under test. The
    actors are the real-engine sweeps' and test_loadgen's."""
    fields = dict(
        name=name,
        engine=EngineKind.FAKE,
        gpus=("cpu",),
        policies=("fcfs",),
        jps=(2,),
        workload=WorkloadSpec(jps=1, duration_s=2, scale=0.05, tool_time_s=0.1),
        limits=RunLimits(health_timeout_s=60, hang_timeout_s=20, poll_s=0.2, client_actors=0),
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
