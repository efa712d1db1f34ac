"""Decode runs (``sim.decode_run``) are an optimisation, not a model: a cell simulated with them gives the very
records, counters and trace (to the byte) that stepping one event at a time gives, across policies, routers, CPU
tiers, pins, shared prefixes and memory pressure."""

from __future__ import annotations

import pytest

from orchestrator.records.scheduler_trace import DecodeSteps
from orchestrator.roofline.hardware import Device
from orchestrator.routing.rules import RouterKind
from orchestrator.sim import decode_run
from orchestrator.sim.config import sim_engine
from orchestrator.sim.loop import Replicas, simulate
from orchestrator.workload.schedule import schedule_for
from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.traces.generate import SHIPPED
from orchestrator.workload.traces.schema import TraceRef

LLAMA = "llama-3.1-8b-instruct"
LIGHT = WorkloadSpec(jps=1, duration_s=40, request_timeout_s=60, job_timeout_s=120)
REPLAY = WorkloadSpec(jps=2, duration_s=86_400, trace=TraceRef.of(SHIPPED))  # declared shared blocks


def _simulated(gpu: str, policy: str, workload: WorkloadSpec, replicas: Replicas, dram_gb: float = 32):
    engine = sim_engine(Device.gpu(gpu), LLAMA, policy, dram_gb, workload)
    return simulate(workload, engine, schedule_for(workload), replicas)


CASES = [
    ("H100", "fcfs", LIGHT, Replicas()),
    ("H100", "continuum", LIGHT, Replicas()),  # pins expire during runs
    ("L40S", "lmcache", LIGHT, Replicas()),
    ("L40S", "native-offload", LIGHT, Replicas()),
    ("L40S", "continuum", WorkloadSpec(jps=4, duration_s=20), Replicas()),  # pressure: pins released, preemptions
    ("H100", "fcfs", LIGHT, Replicas(3, RouterKind.ROUND_ROBIN)),
    ("H100", "continuum", LIGHT, Replicas(2, RouterKind.SESSION_AFFINITY)),
    ("A100", "continuum", REPLAY, Replicas()),
    ("A100", "lmcache", REPLAY, Replicas(2, RouterKind.PREFIX_AWARE)),
]


@pytest.mark.parametrize(("gpu", "policy", "workload", "replicas"), CASES,
                         ids=[f"{c[0]}-{c[1]}-{'replay' if c[2].trace else c[2].jps}-x{c[3].count}" for c in CASES])  # fmt: skip
def test_a_cell_with_decode_runs_is_the_cell_stepped_one_event_at_a_time(monkeypatch, gpu, policy, workload, replicas):
    with_runs = _simulated(gpu, policy, workload, replicas)
    runs = [entry for trace in with_runs.replica_scheduler_traces for entry in trace if isinstance(entry, DecodeSteps)]
    assert runs, "no decode run was taken: the case tests nothing"
    monkeypatch.setattr(decode_run, "MIN_RUN_STEPS", 10**9)
    stepped = _simulated(gpu, policy, workload, replicas)
    assert not any(isinstance(entry, DecodeSteps) for trace in stepped.replica_scheduler_traces for entry in trace)
    assert with_runs.scheduler_trace_bytes() == stepped.scheduler_trace_bytes()
    assert with_runs.requests == stepped.requests and with_runs.jobs == stepped.jobs
    assert with_runs.stats == stepped.stats
