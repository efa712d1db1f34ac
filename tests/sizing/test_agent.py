"""The load at which tool calls alone overflow a KV pool: the bound that holds on any machine."""

from __future__ import annotations

import pytest

from orchestrator.sizing.agent import pressure_jps, tool_time_corpus_tokens
from orchestrator.workload.spec import WorkloadSpec


def test_the_tool_time_corpus_is_every_jobs_context_held_through_each_tool_call():
    """At scale 0.25 a job's contexts after turns 1-7 (the system prompt, then each tool output and 20 answer tokens
    added) are held for 0.5 s each: at 2 JPS, Little's law keeps twice their sum times 0.5 s in tool calls."""
    workload = WorkloadSpec(jps=2, duration_s=5, scale=0.25)
    prompts = [workload.scaled_system_prompt_tokens]
    for tokens in workload.tool_tokens:
        prompts.append(prompts[-1] + 20 + workload.scaled(tokens))
    held = sum(prompt + 20 for prompt in prompts[:-1])
    assert tool_time_corpus_tokens(workload) == pytest.approx(2 * 0.5 * held)


def test_the_pressure_load_is_the_first_on_its_grid_whose_tool_time_corpus_passes_the_pool():
    workload = WorkloadSpec(jps=1, duration_s=5, scale=0.25)
    pool = 1199 * 32
    jps = pressure_jps(workload, pool)
    assert tool_time_corpus_tokens(workload.model_copy(update={"jps": jps})) > pool
    assert tool_time_corpus_tokens(workload.model_copy(update={"jps": jps - 1})) <= pool
    assert jps == 8  # the CPU engine's test sweep and sweeps/cpu_tiny.py put their pressure cells here
    assert pressure_jps(workload, 2 * pool) > jps


def test_a_workload_without_tool_time_has_no_pressure_load():
    with pytest.raises(ValueError, match="without tool time"):
        pressure_jps(WorkloadSpec(jps=1, duration_s=5, scale=0.25, tool_time_s=0), 1000)
