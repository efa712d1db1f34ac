"""The scheduler trace's parquet table (``records.scheduler_trace_file``): the same events as the JSON lines it replaces, from
either writer (the plugin's lines, the simulator's entries with their decode runs whole), for one replica and for
several, and the readers that take only part of it."""

from __future__ import annotations

import functools

import pytest

from orchestrator.records import scheduler_trace_file
from orchestrator.records.scheduler_trace import DecodeSteps, json_line, trace_bytes
from orchestrator.records.scheduler_trace_file import (
    parquet_of_entries,
    parquet_of_lines,
    step_batches,
    time_range,
    trace_events,
    trace_file_frame,
    trace_frame,
)
from orchestrator.roofline.hardware import Device
from orchestrator.routing.rules import RouterKind
from orchestrator.sim.config import sim_engine
from orchestrator.sim.loop import Replicas, SimResult, simulate
from orchestrator.workload.spec import WorkloadSpec

WORKLOAD = WorkloadSpec(jps=2, duration_s=20, request_timeout_s=60, job_timeout_s=120)


@functools.cache
def simulated(policy: str, count: int) -> SimResult:
    engine = sim_engine(Device.gpu("L40S"), "llama-3.1-8b-instruct", policy, 32, WORKLOAD)
    return simulate(WORKLOAD, engine, replicas=Replicas(count, RouterKind.ROUND_ROBIN if count > 1 else None))


@pytest.mark.parametrize(("policy", "count"), [("continuum", 1), ("lmcache", 3)])
def test_both_writers_store_the_events_the_json_lines_held(policy, count):
    result = simulated(policy, count)
    assert any(isinstance(entry, DecodeSteps) for trace in result.replica_scheduler_traces for entry in trace)
    lines = result.scheduler_trace_bytes()
    for data in (parquet_of_entries(result.replica_scheduler_traces), parquet_of_lines(lines)):
        replicas = None if count == 1 else list(trace_frame(data).replica.astype(int))
        assert trace_bytes(trace_events(data), replicas) == lines  # every field, type and order, the tags too
        assert len(data) < len(lines) / 4
    assert trace_events(lines) == result.scheduler_trace  # older results' JSON lines read the same way
    probe = json_line({"kind": "probe", "t": 0.5, "note": "a test's own event"}).encode()
    assert trace_events(parquet_of_lines(probe + lines)) == result.scheduler_trace  # left out, as read_trace leaves it


def test_readers_take_the_kinds_asked_for_and_the_steps_a_row_group_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setattr(scheduler_trace_file, "ROW_GROUP_ROWS", 64)  # many row groups from a small cell
    result = simulated("continuum", 3)
    path = tmp_path / "scheduler_trace.parquet"
    path.write_bytes(parquet_of_entries(result.replica_scheduler_traces))
    pins = trace_file_frame(path, ("finish", "unpin"))
    assert set(pins.kind) == {"finish", "unpin"}
    assert len(pins) == sum(event.kind in ("finish", "unpin") for event in result.scheduler_trace)
    batches = list(step_batches(path, ("t", "running")))
    assert len(batches) > 3 and list(batches[0].columns) == ["t", "running"]
    steps = [event for event in result.scheduler_trace if event.kind == "step"]
    assert [row.t for batch in batches for row in batch.itertuples()] == [step.t for step in steps]
    assert time_range(path) == (result.scheduler_trace[0].t, result.scheduler_trace[-1].t)
    legacy = tmp_path / "scheduler_trace.jsonl"
    legacy.write_bytes(result.scheduler_trace_bytes())
    # pandas reads JSON floats to within a unit in the last place
    assert list(trace_file_frame(legacy, ("unpin",)).held_s) == pytest.approx(list(pins[pins.kind == "unpin"].held_s))


def test_a_trace_with_no_lines_writes_no_table():
    assert parquet_of_lines(b"") == b"" and trace_events(b"") == [] and trace_frame(b"").empty
