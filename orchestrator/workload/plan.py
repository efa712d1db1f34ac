"""The schedule rendered as text up front: the system prompt and every job's tool outputs, sized by the
served model's tokenizer; or, for a replayed trace, every prompt whole.

A replay's prompt is its declared blocks' texts, then a tail of its own. A block's text depends only on its
id, so two requests that declare the same blocks send the same tokens there, and the prefix cache can hit
exactly those; every text is pool words after a space, which tokenizers split at, so the parts' token
counts add up. Replays never carry the model's answers into later prompts (those are planned whole), so
nothing undeclared can be shared.

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
    """One request of a job: its ``prompt`` when planned whole (a replay), else the job's context so far, to
    which the answer and ``tool_output`` are appended after this turn completes."""

    turn: int  # 1-based
    target_prompt_tokens: int
    output_tokens: int  # the completion's exact length
    tool_output: str | None  # None on the last turn, which has no tool call, and in a replay
    tool_time_s: float  # the tool call's time before the next turn
    is_last: bool
    prompt: str | None = None


@dataclass(frozen=True)
class JobPlan:
    """A job of the schedule with its turns rendered."""

    shape: JobShape
    turns: tuple[TurnPlan, ...]

    @property
    def job_id(self) -> str:
        return self.shape.job_id

    @property
    def index(self) -> int:
        return self.shape.index

    @property
    def arrival_offset_s(self) -> float:
        return self.shape.arrival_s


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
                if turn.prompt is not None:
                    digest.update(f"|{turn.prompt}".encode())
        return digest.hexdigest()

    def shard(self, index: int, count: int) -> WorkloadPlan:
        """Every ``count``-th job starting at ``index``, so several client actors can split one cell."""
        if not 0 <= index < count:
            raise ValueError(f"shard index {index} is outside 0..{count - 1}")
        return WorkloadPlan(self.spec, self.system_prompt, self.jobs[index::count])


def build_plan(spec: WorkloadSpec, counter: TokenCounter, schedule: Schedule | None = None) -> WorkloadPlan:
    """The full plan for ``spec`` (its ``schedule``, drawn here when not given), with texts sized by ``counter``
    (the served model's tokenizer)."""
    schedule = schedule or schedule_for(spec)
    if schedule.is_replay:
        replay = _ReplayTexts(counter, schedule.block_tokens)
        return WorkloadPlan(spec=spec, system_prompt="", jobs=tuple(map(replay.job_plan, schedule.jobs)))
    tool_sizer = TextSizer(lambda text: counter.count(TOOL_SEPARATOR + text))
    system_prompt = TextSizer(counter.count_prompt).text(
        "[system]", f"system:{spec.seed}", spec.scaled_system_prompt_tokens
    )
    jobs = tuple(_job_plan(job, tool_sizer) for job in schedule.jobs)
    return WorkloadPlan(spec=spec, system_prompt=system_prompt, jobs=jobs)


def _job_plan(job: JobShape, tool_sizer: TextSizer) -> JobPlan:
    def tool_output(shape: TurnShape) -> str | None:
        if shape.tool_tokens is None:
            return None
        header, key = tool_output_header(job.job_id, shape.turn), tool_output_key(job.job_id, shape.turn)
        return tool_sizer.text(header, key, shape.tool_tokens)

    turns = tuple(
        TurnPlan(shape.turn, shape.prompt_tokens, shape.output_tokens, tool_output(shape), shape.tool_time_s,
                 shape.is_last)  # fmt: skip
        for shape in job.turns
    )
    return JobPlan(job, turns)


class _ReplayTexts:
    """A replay's prompts: each declared block's text made once, then a tail per request. The prompt's first
    part is sized as a whole prompt (with the BOS the server adds), the rest as fragments."""

    def __init__(self, counter: TokenCounter, block_tokens: int):
        self._first, self._rest = TextSizer(counter.count_prompt), TextSizer(counter.count)
        self._block_tokens = block_tokens
        self._blocks: dict[str, str] = {}

    def job_plan(self, job: JobShape) -> JobPlan:
        turns = tuple(
            TurnPlan(shape.turn, shape.prompt_tokens, shape.output_tokens, None, shape.tool_time_s, shape.is_last,
                     prompt=self._prompt(job.job_id, shape))  # fmt: skip
            for shape in job.turns
        )
        return JobPlan(job, turns)

    def _prompt(self, job_id: str, shape: TurnShape) -> str:
        blocks = [self._block(block_id, position) for position, block_id in enumerate(shape.prefix_blocks)]
        tail_tokens = shape.prompt_tokens - len(blocks) * self._block_tokens
        sizer = self._rest if blocks else self._first
        tail = sizer.text("", f"tail:{job_id}:{shape.turn}", tail_tokens) if tail_tokens > 0 else ""
        return "".join(blocks) + tail

    def _block(self, block_id: str, position: int) -> str:
        # An id always sits at one position (the trace's check), so its text is sized once, for that position.
        if block_id not in self._blocks:
            sizer = self._first if position == 0 else self._rest
            self._blocks[block_id] = sizer.text("", f"block:{block_id}", self._block_tokens)
        return self._blocks[block_id]
