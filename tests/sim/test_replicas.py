"""Simulated cells of several replicas behind a router: each engine keeps its own clock, a job's KV lives on the
replica that served it, and the router decides whether the next turn finds it."""

from __future__ import annotations

import functools

import pytest

from orchestrator.cell.spec import EngineKind
from orchestrator.records.scheduler_trace import Step, read_trace
from orchestrator.records.summary import summarize
from orchestrator.roofline.hardware import Device
from orchestrator.routing.rules import RouterKind
from orchestrator.sim.config import sim_engine
from orchestrator.sim.loop import Replicas, simulate
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.workload.schedule import schedule_for
from orchestrator.workload.spec import WorkloadSpec

LLAMA = "llama-3.1-8b-instruct"
# Two L40S replicas at 5 jobs per second: memory pressure on each, so what a turn finds depends on where it lands.
WORKLOAD = WorkloadSpec(jps=5, duration_s=20)


@functools.cache
def run(policy: str, router: RouterKind | None, count: int = 2):
    engine = sim_engine(Device.gpu("L40S"), LLAMA, policy, 32, WORKLOAD)
    result = simulate(WORKLOAD, engine, schedule_for(WORKLOAD), Replicas(count, router))
    return result, summarize(result.requests, result.jobs, result.scheduler_trace_bytes())


def test_replicas_step_at_the_same_time_each_on_its_own_clock():
    result, summary = run("fcfs", RouterKind.LEAST_LOADED)
    # Both engines were busy for most of the run: their busy time together exceeds the run's span, which one shared
    # clock (a step holding back the other replica's events) could not give.
    assert result.stats.busy_s > 1.5 * summary.span_s
    replicas = result.scheduler_trace_replicas
    assert set(replicas) == {0, 1} and len(replicas) == len(result.scheduler_trace)
    tagged = list(zip(result.scheduler_trace, replicas))
    steps_of = [[e.step for e, r in tagged if isinstance(e, Step) and r == n] for n in (0, 1)]
    assert all(numbers == list(range(1, len(numbers) + 1)) for numbers in steps_of)  # each engine counts its own
    assert read_trace(result.scheduler_trace_bytes()) == result.scheduler_trace  # the replica tag is read past
    assert b'"replica":1' in result.scheduler_trace_bytes()


def test_session_affinity_keeps_a_jobs_turns_where_its_kv_is_and_round_robin_scatters_them():
    _, affinity = run("continuum", RouterKind.SESSION_AFFINITY)
    _, scattered = run("continuum", RouterKind.ROUND_ROBIN)
    assert affinity.turns_moved_pct < 5 and affinity.prefix_kept_pct >= 90
    assert scattered.turns_moved_pct > 40 and scattered.prefix_kept_pct < affinity.prefix_kept_pct - 15
    # Continuum's pins under round-robin are held for a next turn that lands elsewhere: they expire unused.
    assert scattered.pin_expired_pct > 3 * affinity.pin_expired_pct
    assert scattered.jct_mean_s > affinity.jct_mean_s


def test_prefix_aware_routing_finds_the_jobs_prefix_as_affinity_does():
    _, prefix = run("continuum", RouterKind.PREFIX_AWARE)
    _, scattered = run("continuum", RouterKind.ROUND_ROBIN)
    assert prefix.prefix_kept_pct > scattered.prefix_kept_pct + 15 and prefix.turns_moved_pct < 25


def test_one_replica_has_no_router_and_no_moved_turn():
    result, summary = run("fcfs", None, count=1)
    assert result.scheduler_trace_replicas is None and summary.turns_moved_pct == 0
    assert {record.replica for record in result.requests} == {0}


def test_several_replicas_without_a_router_are_refused():
    with pytest.raises(ValueError, match="2 replicas with router None; valid: 1 replica, or more with a router"):
        Replicas(2)


def test_routed_cells_on_gpus_hold_a_gang_of_their_replica_count_and_nowhere_else():
    on_gpus = SweepSpec(name="r", engine=EngineKind.VLLM, gpus=("H100",), policies=("fcfs",), jps=(1,),
                        replicas=(1, 2), serve_overhead=True)  # fmt: skip
    gangs = sorted((cell.replicas, cell.gang_size) for cell in expand(on_gpus, lambda gpu: True))
    assert gangs == [(1, 0), (1, 1), (2, 2)]  # one replica direct holds its worker's GPU; through Serve, a gang
    on_cpu = SweepSpec(name="r", engine=EngineKind.VLLM, gpus=("cpu",), policies=("fcfs",), jps=(1,), replicas=(1, 2),
                       serve_overhead=True)  # fmt: skip
    assert on_cpu.replica_setups() == ((1, None), (1, RouterKind.ROUND_ROBIN), (2, RouterKind.LEAST_LOADED))
    assert {cell.gang_size for cell in expand(on_cpu, lambda gpu: True)} == {0}  # beside their worker
    spec = SweepSpec(name="r", engine=EngineKind.SIM, gpus=("H100",), policies=("fcfs",), jps=(1,), replicas=(1, 2),
                     routers=("session-affinity", "round-robin"), model=LLAMA)  # fmt: skip
    assert spec.replica_setups() == ((1, None), (2, RouterKind.SESSION_AFFINITY), (2, RouterKind.ROUND_ROBIN))
    assert {cell.gang_size for cell in expand(spec, lambda gpu: True)} == {0}  # simulated: no GPU held
