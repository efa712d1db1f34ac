from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from orchestrator.workload.distributions import PRESETS, IntUniform
from orchestrator.workload.plan import build_plan
from orchestrator.workload.schedule import schedule_for
from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.text import TOOL_SEPARATOR, text_digest


def test_same_seed_gives_byte_identical_plan(tiny_counter):
    spec = WorkloadSpec(jps=3, duration_s=10, scale=0.25, seed=7)
    first, second = build_plan(spec, tiny_counter), build_plan(spec, tiny_counter)
    assert first == second
    assert first.fingerprint() == second.fingerprint()
    assert [t.tool_output.encode() for j in first.jobs for t in j.turns[:-1]] == [
        t.tool_output.encode() for j in second.jobs for t in j.turns[:-1]
    ]


def test_different_seed_changes_schedule_and_texts(tiny_counter):
    base = build_plan(WorkloadSpec(jps=3, duration_s=10, scale=0.25, seed=7), tiny_counter)
    other = build_plan(WorkloadSpec(jps=3, duration_s=10, scale=0.25, seed=8), tiny_counter)
    assert base.fingerprint() != other.fingerprint()
    assert {j.arrival_offset_s for j in base.jobs}.isdisjoint({j.arrival_offset_s for j in other.jobs})
    texts = {t.tool_output for j in base.jobs for t in j.turns[:-1]}
    assert texts.isdisjoint({t.tool_output for j in other.jobs for t in j.turns[:-1]})


def test_tool_outputs_are_unique_per_job_and_turn_and_carry_the_header(tiny_counter):
    plan = build_plan(WorkloadSpec(jps=4, duration_s=10, scale=0.25), tiny_counter)
    outputs = [(job.job_id, turn.turn, turn.tool_output) for job in plan.jobs for turn in job.turns[:-1]]
    assert len({text for _, _, text in outputs}) == len(outputs)
    for job_id, turn, text in outputs:
        digest = text_digest(f"{job_id}:{turn}")
        assert text.startswith(f"[{job_id}:turn{turn}:{digest[:8]}] ")
    # No tool output body (after its header) repeats another's: the prefix cache cannot share them.
    bodies = [text.split("] ", 1)[1] for _, _, text in outputs]
    assert len(set(bodies)) == len(bodies)


@pytest.mark.parametrize("workload", ["source-study", "parametric"])
def test_texts_hit_their_token_targets_exactly_with_the_tiny_tokenizer(tiny_counter, workload):
    spec = WorkloadSpec(jps=2, duration_s=5, scale=0.25)
    if workload == "parametric":
        spec = spec.model_copy(update={"num_turns": IntUniform(low=2, high=6), "tool_tokens": PRESETS["agent-tool-tokens"],
                                       "output_tokens": PRESETS["agent-output-tokens"]})  # fmt: skip
    schedule = schedule_for(spec)
    plan = build_plan(spec, tiny_counter, schedule)
    assert tiny_counter.count_prompt(plan.system_prompt) == spec.scaled_system_prompt_tokens
    for job, shape in zip(plan.jobs, schedule.jobs, strict=True):
        sizes = [tiny_counter.count(TOOL_SEPARATOR + turn.tool_output) for turn in job.turns[:-1]]
        assert sizes == [turn.tool_tokens for turn in shape.turns[:-1]]
        assert [turn.output_tokens for turn in job.turns] == [turn.output_tokens for turn in shape.turns]
        assert job.turns[-1].tool_output is None and job.turns[-1].is_last


def test_shards_partition_the_jobs(tiny_counter):
    plan = build_plan(WorkloadSpec(jps=3, duration_s=10, scale=0.25), tiny_counter)
    shards = [plan.shard(i, 3) for i in range(3)]
    ids = sorted(job.job_id for shard in shards for job in shard.jobs)
    assert ids == sorted(job.job_id for job in plan.jobs)
    with pytest.raises(ValueError, match="shard index 3"):
        plan.shard(3, 3)


@pytest.mark.parametrize(
    "fields, bad",
    [({"jps": 0}, "jps"), ({"jps": 1, "scale": -1}, "scale"), ({"jps": 1, "tool_tokens": (1, 2)}, "tool_tokens"),
     ({"jps": 1, "surprise": 1}, "surprise")],
)
def test_bad_workload_fields_are_rejected_with_their_name(fields, bad):
    with pytest.raises(ValidationError, match=re.escape(bad)):
        WorkloadSpec(**fields)
