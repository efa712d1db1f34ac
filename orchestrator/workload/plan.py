"""The schedule rendered as text up front: the system prompt and every job's tool outputs, sized by the
served model's tokenizer.

Like MLPerf LoadGen, nothing random or expensive happens once the clock starts: the load generator only
sleeps until each planned time. Every policy in a comparison gets the identical plan.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from orchestrator.workload.schedule import JobShape, Schedule, TurnShape, schedule_for
from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.text import TOOL_SEPARATOR, TextSizer, TokenCounter, tool_output_header, tool_output_key


@dataclass(frozen=True)
class TurnPlan:
    """One request of a job. ``tool_output`` is appended to the context after this turn completes."""

    turn: int  # 1-based
    target_prompt_tokens: int
    output_tokens: int  # the completion's exact length
    tool_output: str | None  # None on the last turn, which has no tool call
    tool_time_s: float  # the tool call's time before the next turn

    @property
    def is_last(self) -> bool:
        return self.tool_output is None


@dataclass(frozen=True)
class JobPlan:
    job_id: str
    index: int  # arrival order; doubles as the job's priority for program-level FCFS
    arrival_offset_s: float  # from the start of the arrival window
    turns: tuple[TurnPlan, ...]


@dataclass(frozen=True)
class WorkloadPlan:
    spec: WorkloadSpec
    system_prompt: str
    jobs: tuple[JobPlan, ...]

    def fingerprint(self) -> str:
        """sha256 over every prompt text and arrival; equal plans send byte-identical prompts. Completion
        lengths and tool times are in the schedule's fingerprint, which the cell records beside this one."""
        digest = hashlib.sha256(self.system_prompt.encode())
        for job in self.jobs:
            digest.update(f"|{job.job_id}|{job.index}|{job.arrival_offset_s!r}".encode())
            for turn in job.turns:
                digest.update(f"|{turn.turn}|{turn.target_prompt_tokens}|{turn.tool_output}".encode())
        return digest.hexdigest()

    def shard(self, index: int, count: int) -> WorkloadPlan:
        """Every ``count``-th job starting at ``index``, so several client actors can split one cell."""
        if not 0 <= index < count:
            raise ValueError(f"shard index {index} is outside 0..{count - 1}")
        return WorkloadPlan(self.spec, self.system_prompt, self.jobs[index::count])


def build_plan(spec: WorkloadSpec, counter: TokenCounter, schedule: Schedule | None = None) -> WorkloadPlan:
    """The full plan for ``spec`` (its ``schedule``, drawn here when not given), with texts sized by ``counter``
    (the served model's tokenizer)."""
    tool_sizer = TextSizer(lambda text: counter.count(TOOL_SEPARATOR + text))
    system_prompt = TextSizer(counter.count_prompt).text(
        "[system]", f"system:{spec.seed}", spec.scaled_system_prompt_tokens
    )
    jobs = tuple(_job_plan(job, tool_sizer) for job in (schedule or schedule_for(spec)).jobs)
    return WorkloadPlan(spec=spec, system_prompt=system_prompt, jobs=jobs)


def _job_plan(job: JobShape, tool_sizer: TextSizer) -> JobPlan:
    def tool_output(shape: TurnShape) -> str | None:
        if shape.tool_tokens is None:
            return None
        header, key = tool_output_header(job.job_id, shape.turn), tool_output_key(job.job_id, shape.turn)
        return tool_sizer.text(header, key, shape.tool_tokens)

    turns = tuple(
        TurnPlan(shape.turn, shape.prompt_tokens, shape.output_tokens, tool_output(shape), shape.tool_time_s)
        for shape in job.turns
    )
    return JobPlan(job_id=job.job_id, index=job.index, arrival_offset_s=job.arrival_s, turns=turns)
