"""The agent workload's specification: the source study's shape, parameterised by load, length and scale."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

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


class WorkloadSpec(BaseModel):
    """What the load generator sends. Frozen and strict: an unknown field is an error, not ignored.

    Invariant: ``len(tool_tokens) == num_turns - 1`` (the last turn has no tool call).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    jps: float = Field(gt=0, description="Job arrival rate (jobs per second) of the Poisson process.")
    duration_s: float = Field(45.0, gt=0, description="Arrival window; jobs arrive only inside it.")
    seed: int = Field(42, description="Seeds the arrival schedule; every policy of a comparison shares it.")
    scale: float = Field(1.0, gt=0, le=4, description="Multiplies the system prompt and tool output sizes.")
    num_turns: int = Field(8, ge=1)
    tool_tokens: tuple[int, ...] = SOURCE_TOOL_TOKENS
    system_prompt_tokens: int = Field(80, ge=1)
    output_tokens: int = Field(20, ge=1, description="Exact completion length of every turn (not scaled).")
    tool_time_s: float = Field(0.5, ge=0, description="Client-side tool execution time between turns.")
    request_timeout_s: float = Field(600.0, gt=0)
    job_timeout_s: float = Field(3600.0, gt=0)

    @model_validator(mode="after")
    def _tools_match_turns(self) -> WorkloadSpec:
        check_jobs_per_cell(self.jps, self.duration_s)
        if len(self.tool_tokens) != self.num_turns - 1:
            raise ValueError(
                f"tool_tokens has {len(self.tool_tokens)} sizes but num_turns={self.num_turns} needs "
                f"{self.num_turns - 1} (one per turn but the last)"
            )
        return self

    def scaled(self, tokens: int) -> int:
        return max(1, round(tokens * self.scale))

    @property
    def scaled_system_prompt_tokens(self) -> int:
        return self.scaled(self.system_prompt_tokens)

    @property
    def scaled_tool_tokens(self) -> tuple[int, ...]:
        return tuple(self.scaled(tokens) for tokens in self.tool_tokens)

    def target_prompt_tokens(self) -> tuple[int, ...]:
        """Prompt tokens each turn should measure: system prompt plus every earlier completion and tool output."""
        targets = [self.scaled_system_prompt_tokens]
        for tool in self.scaled_tool_tokens:
            targets.append(targets[-1] + self.output_tokens + tool)
        return tuple(targets)
