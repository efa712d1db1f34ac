"""The agent workload's specification: the source study's shape, parameterised by load, length and scale,
or a parametric agent workload whose turns, sizes and tool times are drawn from distributions.

A shape field given as a number (or, for tool outputs, a list per turn) is the source study's kind: the
same for every job. Given as a distribution (``workload/distributions.py``), it is drawn per job or per
turn from the cell's seed when the schedule is built (``workload/schedule.py``). Numbers dump as they
always have, so the keys of cells measured before distributions existed do not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchestrator.workload.distributions import Distribution
from orchestrator.workload.traces.schema import TraceRef, load_trace

# Tool-output sizes (tokens) appended after turns 1..7 in the source study, at scale 1.0.
SOURCE_TOOL_TOKENS: tuple[int, ...] = (1640, 1510, 2455, 1335, 2730, 1930, 775)
# The plan of a cell is built whole before its clock starts; 30x the source study's largest cell (15 JPS
# over 45 s) keeps that in memory and seconds, and stops a typo such as --jps 1e9 before it plans billions.
MAX_JOBS_PER_CELL = 20_000


def check_jobs_per_cell(jps: float, duration_s: float) -> None:
    """Raises ``ValueError`` naming the load when a cell would plan more than ``MAX_JOBS_PER_CELL`` jobs."""
    expected = jps * duration_s
    if expected > MAX_JOBS_PER_CELL:
        raise ValueError(
            f"jobs per second {jps:g} over a {duration_s:g} s arrival window plans about {expected:.3g} jobs per cell; "
            f"valid: at most {MAX_JOBS_PER_CELL} jobs per cell (jps <= {MAX_JOBS_PER_CELL / duration_s:.4g} for this window)"
        )


WorkloadSource = Literal["source-study", "parametric", "trace"]
_SHAPE_FIELDS = ("num_turns", "tool_tokens", "output_tokens", "tool_time_s", "system_prompt_tokens")


@dataclass(frozen=True)
class ShapeMeans:
    """A job's expected shape, for estimates made before any schedule is drawn (``sizing/agent.py``)."""

    turns: float
    final_prompt_tokens: float  # the last turn's prompt
    mean_prompt_tokens: float  # over a job's turns
    output_tokens: float  # per turn
    tool_time_s: float  # per tool call


class WorkloadSpec(BaseModel):
    """What the load generator sends. Frozen and strict: an unknown field is an error, not ignored.

    Invariant: with a fixed ``num_turns``, a list of ``tool_tokens`` has ``num_turns - 1`` sizes (the last
    turn has no tool call); a list needs a fixed number of turns.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    jps: float = Field(gt=0, description="Job arrival rate (jobs per second) of the Poisson process.")
    duration_s: float = Field(45.0, gt=0, description="Arrival window; jobs arrive only inside it.")
    seed: int = Field(42, description="Seeds the arrival schedule; every policy of a comparison shares it.")
    scale: float = Field(1.0, gt=0, le=4, description="Multiplies the system prompt and tool output sizes.")
    num_turns: Annotated[int, Field(ge=1)] | Distribution = Field(8, description="Turns per job (draws round to >= 1).")
    tool_tokens: tuple[int, ...] | Distribution = Field(
        SOURCE_TOOL_TOKENS, description="Tool-output tokens appended after each turn but the last (scaled).")
    system_prompt_tokens: int = Field(80, ge=1)
    output_tokens: Annotated[int, Field(ge=1)] | Distribution = Field(
        20, description="Exact completion length of a turn (not scaled; draws round to >= 1).")
    tool_time_s: Annotated[float, Field(ge=0)] | Distribution = Field(
        0.5, description="Client-side tool execution time between turns.")
    request_timeout_s: float = Field(600.0, gt=0)
    job_timeout_s: float = Field(3600.0, gt=0)
    # A replayed trace: its jobs replace the shape above; ``jps`` rescales its arrivals and ``duration_s``
    # cuts them. Left out of cell keys when None, so keys from before traces existed stay what they were.
    trace: TraceRef | None = None
    # Jobs with a request (prompt and answer) longer than this are dropped whole from the schedule, and counted; left
    # out of cell keys when None.
    max_context: int | None = Field(None, ge=1, description="Drop whole jobs with a request longer than this.")

    @model_validator(mode="after")
    def _tools_match_turns(self) -> WorkloadSpec:
        if self.trace is None:  # a replay has the trace's jobs, however long its window
            check_jobs_per_cell(self.jps, self.duration_s)
        else:
            changed = [name for name in _SHAPE_FIELDS if getattr(self, name) != type(self).model_fields[name].default]
            if changed:
                raise ValueError(f"a replayed trace has its own turns, sizes and tool times; {', '.join(changed)} "
                                 "cannot be set beside it")  # fmt: skip
        if isinstance(self.tool_tokens, tuple) and not isinstance(self.num_turns, int):
            raise ValueError(
                f"tool_tokens lists {len(self.tool_tokens)} sizes, one per turn, but num_turns is drawn from a "
                f"{self.num_turns.kind} distribution; give tool_tokens as a distribution too"
            )
        if isinstance(self.tool_tokens, tuple) and len(self.tool_tokens) != self.num_turns - 1:
            raise ValueError(
                f"tool_tokens has {len(self.tool_tokens)} sizes but num_turns={self.num_turns} needs "
                f"{self.num_turns - 1} (one per turn but the last)"
            )
        return self

    @property
    def source(self) -> WorkloadSource:
        """``trace`` for a replay, ``parametric`` when any of the job's shape is drawn from a distribution."""
        if self.trace is not None:
            return "trace"
        shape = (self.num_turns, self.tool_tokens, self.output_tokens, self.tool_time_s)
        return "source-study" if all(isinstance(value, (int, float, tuple)) for value in shape) else "parametric"

    def scaled(self, tokens: float) -> int:
        return max(1, round(tokens * self.scale))

    @property
    def scaled_system_prompt_tokens(self) -> int:
        return self.scaled(self.system_prompt_tokens)

    def mean_shape(self) -> ShapeMeans:
        """The expected job: exact for a fixed shape, from the distributions' means otherwise, the trace's
        own means for a replay."""
        if self.trace is not None:
            return self._trace_means()
        turns = _mean(self.num_turns)
        output = _mean(self.output_tokens)
        if isinstance(self.tool_tokens, tuple):
            growth = [output + self.scaled(tokens) for tokens in self.tool_tokens]
        else:
            growth = [output + self.tool_tokens.mean * self.scale] * max(0, round(turns) - 1)
        prompts = [float(self.scaled_system_prompt_tokens)]
        for added in growth:
            prompts.append(prompts[-1] + added)
        return ShapeMeans(turns, prompts[-1], sum(prompts) / len(prompts), output, _mean(self.tool_time_s))

    def _trace_means(self) -> ShapeMeans:
        jobs = load_trace(self.trace).jobs
        turns = [turn for job in jobs for turn in job.turns]
        tools = [turn.tool_s for job in jobs for turn in job.turns[:-1]]
        return ShapeMeans(
            turns=len(turns) / len(jobs),
            final_prompt_tokens=sum(self.scaled(job.turns[-1].input_tokens) for job in jobs) / len(jobs),
            mean_prompt_tokens=sum(self.scaled(turn.input_tokens) for turn in turns) / len(turns),
            output_tokens=sum(turn.output_tokens for turn in turns) / len(turns),
            tool_time_s=sum(tools) / len(tools) if tools else 0.0,
        )

    @property
    def arrival_window_s(self) -> float:
        """How long jobs keep arriving: ``duration_s``, or a replay's rescaled span if that ends sooner."""
        if self.trace is None:
            return self.duration_s
        jobs = load_trace(self.trace).jobs
        return min(self.duration_s, (jobs[-1].arrival_s - jobs[0].arrival_s) / self.load_multiplier())

    def load_multiplier(self) -> float | None:
        """A replay's rate over the trace's own; None for the other sources."""
        return None if self.trace is None else self.jps / load_trace(self.trace).native_jps

    def held_prefix_tokens(self) -> int:
        """Tokens every cell keeps cached for its whole run: the system prompt, which every request sends. A
        trace's shared blocks are cached as they are sent and evicted like any other (``sim.blocks``)."""
        return 0 if self.trace is not None else self.scaled_system_prompt_tokens


def _mean(value: float | Distribution) -> float:
    return float(value) if isinstance(value, (int, float)) else value.mean
