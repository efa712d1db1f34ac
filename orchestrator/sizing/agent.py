"""Working sets of the agent workload, estimated before a run (pure): which regime will a cell be in?

A job's context stays needed across its tool gaps, so the reuse corpus is the context of every job in
flight, and the live set is the context of the jobs inside a turn. Jobs in flight follow Little's law
from an unqueued job time: a roofline turn (prefill of the turn's new tokens at an assumed 40% of peak
FLOP/s, 20 decode steps reading the weights at 70% of HBM bandwidth) plus the tool times, for the workload's
expected job. When the offered prefill work exceeds what the GPU does (load >= 1), queues grow for the whole
arrival window and every job that arrived is taken to be in flight, in a turn. Behind a router, each of a cell's
replicas is offered its share of the jobs, and the sets are one replica's. These are estimates for a warning, not a
model of the run: the simulator is the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.gpus import GpuType
from orchestrator.models.arch import ModelArch
from orchestrator.workload.spec import WorkloadSpec

ASSUMED_MFU = 0.4
ASSUMED_HBM_EFFICIENCY = 0.7


@dataclass(frozen=True)
class AgentWorkingSets:
    turn_time_s: float  # one unqueued turn
    offered_load: float  # prefill work offered / prefill work the GPU can do; >= 1: queues grow
    jobs_in_flight: float
    live_tokens: float
    corpus_tokens: float


def agent_working_sets(workload: WorkloadSpec, arch: ModelArch, gpu: GpuType, replicas: int = 1) -> AgentWorkingSets:
    job = workload.mean_shape()
    jps = workload.jps / replicas
    # With every earlier turn cached, a job prefills its final context once over its turns.
    prefill_per_job = job.final_prompt_tokens + job.output_tokens
    prefill_tokens_per_s = gpu.bf16_tflops * 1e12 * ASSUMED_MFU / (2 * arch.num_parameters)
    decode_step_s = arch.num_parameters * arch.weight_dtype_bytes / (gpu.hbm_gb_s * 1e9 * ASSUMED_HBM_EFFICIENCY)
    turn_time = prefill_per_job / job.turns / prefill_tokens_per_s + job.output_tokens * decode_step_s
    busy_s = job.turns * turn_time
    job_s = busy_s + (job.turns - 1) * job.tool_time_s
    load = jps * prefill_per_job / prefill_tokens_per_s
    mean_context = job.mean_prompt_tokens + job.output_tokens
    if load >= 1:
        in_flight = jps * workload.arrival_window_s
        live = in_flight * mean_context
    else:
        in_flight = jps * job_s
        live = in_flight * mean_context * busy_s / job_s
    return AgentWorkingSets(turn_time, load, in_flight, live, in_flight * mean_context)


def tool_time_corpus_tokens(workload: WorkloadSpec) -> float:
    """The contexts that the workload's tool calls alone keep alive at its load, on an engine of infinite speed: each
    job holds its context after turn t (every turn but the last) through a tool call (module docstring)."""
    job = workload.mean_shape()
    held_per_job = job.turns * job.mean_prompt_tokens - job.final_prompt_tokens + (job.turns - 1) * job.output_tokens
    return workload.jps * job.tool_time_s * held_per_job


def pressure_jps(workload: WorkloadSpec, pool_tokens: float, step_jps: float = 1.0) -> float:
    """The lowest load on a ``step_jps`` grid at which the contexts tool calls alone keep alive exceed a pool of
    ``pool_tokens``: KV pressure on any machine, however fast."""
    per_jps = tool_time_corpus_tokens(workload.model_copy(update={"jps": 1.0}))
    if per_jps <= 0:
        raise ValueError("a workload without tool time keeps no context alive between turns: no load guarantees pressure")
    return math.floor(pool_tokens / per_jps / step_jps + 1) * step_jps
