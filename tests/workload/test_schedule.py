"""The token-level schedule: the source study's shape exactly as before, and the parametric agent workload's
draws (variable turns, sizes and tool times), fixed by the seed and following their distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import stats

from orchestrator.workload.distributions import PRESETS, IntUniform
from orchestrator.workload.schedule import poisson_arrivals, schedule_for
from orchestrator.workload.spec import SOURCE_TOOL_TOKENS, WorkloadSpec

TOOL_TIME = PRESETS["swe-agent-tool-time"]
AGENT = {"num_turns": PRESETS["agent-turns"], "tool_tokens": PRESETS["agent-tool-tokens"],
         "output_tokens": PRESETS["agent-output-tokens"], "tool_time_s": TOOL_TIME}  # fmt: skip


def agent_spec(**fields) -> WorkloadSpec:
    return WorkloadSpec.model_validate({"jps": 2, "duration_s": 20, **AGENT, **fields})


def test_the_source_studys_schedule_is_its_fixed_shape_at_poisson_arrivals():
    spec = WorkloadSpec(jps=1)
    schedule = schedule_for(spec)
    assert schedule.source == "source-study" and spec.source == "source-study"
    assert [job.arrival_s for job in schedule.jobs] == list(poisson_arrivals(1, 45, 42))
    for job in schedule.jobs:
        assert [turn.tool_tokens for turn in job.turns] == [*SOURCE_TOOL_TOKENS, None]
        assert {turn.output_tokens for turn in job.turns} == {20}
        assert [turn.tool_time_s for turn in job.turns] == [0.5] * 7 + [0.0]
        assert job.turns[0].prompt_tokens == 80 and job.turns[-1].prompt_tokens == 80 + 7 * 20 + sum(SOURCE_TOOL_TOKENS)
    means = spec.mean_shape()
    assert (means.turns, means.final_prompt_tokens, means.output_tokens, means.tool_time_s) == (8, 12595, 20, 0.5)


def test_poisson_arrivals_are_sorted_inside_the_window_at_the_requested_rate():
    arrivals = poisson_arrivals(jps=20, duration_s=500, seed=1)
    assert list(arrivals) == sorted(arrivals)
    assert 0 < arrivals[0] and arrivals[-1] < 500
    # 10000 expected; a Poisson count's standard deviation is 100.
    assert abs(len(arrivals) - 10000) < 400
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert abs(sum(gaps) / len(gaps) - 1 / 20) < 0.003


def test_a_parametric_job_grows_its_prompt_by_each_drawn_completion_and_tool_output():
    schedule = schedule_for(agent_spec(scale=0.5))
    assert schedule.source == "parametric"
    assert {len(job.turns) for job in schedule.jobs} <= set(range(8, 16))
    assert len({len(job.turns) for job in schedule.jobs}) > 3
    for job in schedule.jobs:
        assert job.turns[0].prompt_tokens == 40 and job.turns[-1].is_last and job.turns[-1].tool_time_s == 0
        for before, after in zip(job.turns, job.turns[1:]):
            assert after.prompt_tokens == before.prompt_tokens + before.output_tokens + before.tool_tokens
    outputs = {turn.output_tokens for job in schedule.jobs for turn in job.turns}
    assert len(outputs) > 20 and max(outputs) <= 256


def test_the_schedule_is_fixed_by_the_seed_and_each_quantity_draws_from_its_own_stream():
    base = schedule_for(agent_spec())
    assert schedule_for(agent_spec()) == base and schedule_for(agent_spec()).fingerprint() == base.fingerprint()
    assert schedule_for(agent_spec(seed=43)).fingerprint() != base.fingerprint()
    # Another tool-time distribution changes the tool times and the fingerprint, and nothing else.
    other = schedule_for(agent_spec(tool_time_s=IntUniform(low=1, high=3)))
    assert other.fingerprint() != base.fingerprint()
    for job, changed in zip(base.jobs, other.jobs, strict=True):
        assert [(t.prompt_tokens, t.output_tokens, t.tool_tokens) for t in job.turns] == [
            (t.prompt_tokens, t.output_tokens, t.tool_tokens) for t in changed.turns]
        assert {t.tool_time_s for t in changed.turns[:-1]} <= {1.0, 2.0, 3.0}


def test_tool_times_of_a_schedule_follow_the_heavy_tailed_mixture():
    # About 20,000 tool calls over 2,000 jobs, each job drawing from its own stream.
    schedule = schedule_for(agent_spec(jps=40, duration_s=50))
    times = np.array([turn.tool_time_s for job in schedule.jobs for turn in job.turns[:-1]])
    assert len(times) > 15_000
    zero_mass = TOOL_TIME.cdf(0.0)
    assert stats.binomtest(int((times == 0).sum()), len(times), zero_mass).pvalue > 0.001
    top = TOOL_TIME.cdf(math.nextafter(300.0, 0))
    inside = times[(times > 0) & (times < 300)]
    conditional = np.vectorize(lambda x: (TOOL_TIME.cdf(x) - zero_mass) / (top - zero_mass))
    assert stats.kstest(inside, conditional).pvalue > 0.001
    assert schedule.stats().mean_tool_time_s == pytest.approx(TOOL_TIME.mean, rel=0.15)


def test_mean_shape_of_a_parametric_workload_is_near_its_drawn_schedule():
    spec = agent_spec(jps=20, duration_s=50)
    drawn, expected = schedule_for(spec).stats(), spec.mean_shape()
    assert drawn.mean_turns == pytest.approx(expected.turns, rel=0.03)
    assert drawn.mean_output_tokens == pytest.approx(expected.output_tokens, rel=0.03)
    # The expected final prompt takes the mean turn count's growth: close, not exact (turns vary).
    assert drawn.mean_final_prompt_tokens == pytest.approx(expected.final_prompt_tokens, rel=0.1)


def test_a_list_of_tool_sizes_needs_a_fixed_number_of_turns():
    with pytest.raises(ValidationError, match="give tool_tokens as a distribution too"):
        WorkloadSpec(jps=1, num_turns=PRESETS["agent-turns"])


def test_a_request_past_max_model_len_is_named_and_the_default_parametric_workload_fits():
    schedule = schedule_for(WorkloadSpec(jps=1))
    assert schedule.context_error(12595 + 20) is None
    error = schedule.context_error(12_000)
    assert error.startswith("54 requests in 54 of 54 jobs (s42-j00000, s42-j00001, s42-j00002 and 51 more) need more "
                            "than max_model_len 12000 tokens (prompt and answer; the longest 12615)")  # fmt: skip
    # The presets' caps bound the longest job at 16,264 tokens, inside vLLM's default of 16,384.
    assert schedule_for(agent_spec(jps=40, duration_s=50)).context_error(16_384) is None


def test_max_context_drops_whole_jobs_with_a_longer_request_and_counts_them():
    full = schedule_for(agent_spec(jps=40, duration_s=50))
    cut = schedule_for(agent_spec(jps=40, duration_s=50, max_context=8000))

    def longest(job):
        return max(t.context_tokens for t in job.turns)

    assert cut.context_error(8000) is None and full.context_error(8000) is not None
    assert cut.dropped_jobs == tuple(job.job_id for job in full.jobs if longest(job) > 8000) != ()
    assert cut.jobs == tuple(job for job in full.jobs if longest(job) <= 8000)  # the rest untouched
    assert cut.stats().num_jobs_dropped == len(cut.dropped_jobs) and full.stats().num_jobs_dropped == 0
