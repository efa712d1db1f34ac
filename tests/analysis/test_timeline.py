"""A cell's steps binned for the report (``analysis.timeline``): a bounded number of points per replica whatever
the trace's length, each bin's numbers those of the steps in it, read a row group at a time."""

from __future__ import annotations

import numpy as np

from orchestrator.analysis.timeline import step_bins
from orchestrator.records import scheduler_trace_file
from orchestrator.records.scheduler_trace_file import parquet_of_entries
from orchestrator.roofline.hardware import Device
from orchestrator.routing.rules import RouterKind
from orchestrator.sim.config import sim_engine
from orchestrator.sim.loop import Replicas, simulate
from orchestrator.workload.spec import WorkloadSpec


def test_each_replicas_steps_fall_in_a_bounded_number_of_bins_that_summarise_them(tmp_path, monkeypatch):
    workload = WorkloadSpec(jps=4, duration_s=20, request_timeout_s=60, job_timeout_s=120)
    engine = sim_engine(Device.gpu("L40S"), "llama-3.1-8b-instruct", "continuum", 32, workload)
    result = simulate(workload, engine, replicas=Replicas(2, RouterKind.ROUND_ROBIN))
    monkeypatch.setattr(scheduler_trace_file, "ROW_GROUP_ROWS", 100)  # partial aggregates from many row groups combine
    path = tmp_path / "scheduler_trace.parquet"
    path.write_bytes(parquet_of_entries(result.replica_scheduler_traces))
    bins = step_bins(path, num_bins=12)
    tagged = zip(result.scheduler_trace, result.scheduler_trace_replicas)
    steps = [(event, replica) for event, replica in tagged if event.kind == "step"]
    assert len(steps) > 500 and set(bins.replica) == {0, 1}
    assert bins.groupby("replica").size().max() <= 12 and bins.steps.sum() == len(steps)
    first, width = result.scheduler_trace[0].t, (result.scheduler_trace[-1].t - result.scheduler_trace[0].t) / 12
    for row in bins.itertuples():
        inside = [step for step, replica in steps if replica == row.replica
                  and min(int((step.t - first) / width), 11) == round(row.seconds / width)]  # fmt: skip
        assert row.steps == len(inside)
        assert np.isclose(row.running, np.mean([step.running for step in inside]))
        assert row.waiting == max(step.waiting for step in inside)
        assert row.free_blocks == min(step.free_blocks for step in inside)
        assert row.pinned_blocks == max(step.pinned_blocks for step in inside)
