"""The whole workload drawn up front from the seed: arrival times and every job's tool outputs.

Like MLPerf LoadGen, nothing random or expensive happens once the clock starts: the load generator only
sleeps until each planned time. Every policy in a comparison gets the identical plan.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.text import TOOL_SEPARATOR, TextSizer, TokenCounter, tool_output_header, tool_output_key


@dataclass(frozen=True)
class TurnPlan:
    """One request of a job. ``tool_output`` is appended to the context after this turn completes."""

    turn: int  # 1-based
    target_prompt_tokens: int
    tool_output: str | None  # None on the last turn, which has no tool call

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
        """sha256 over everything that is sent and when; equal plans send byte-identical traffic."""
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


def poisson_arrivals(jps: float, duration_s: float, seed: int) -> tuple[float, ...]:
    """Arrival offsets of a Poisson process of rate ``jps`` inside ``[0, duration_s)``."""
    rng = random.Random(seed)
    arrivals: list[float] = []
    now = rng.expovariate(jps)
    while now < duration_s:
        arrivals.append(now)
        now += rng.expovariate(jps)
    return tuple(arrivals)


def job_id_for(seed: int, index: int) -> str:
    # The seed is part of the id so two seeds never produce the same tool text.
    return f"s{seed}-j{index:05d}"


def build_plan(spec: WorkloadSpec, counter: TokenCounter) -> WorkloadPlan:
    """The full plan for ``spec``, with texts sized by ``counter`` (the served model's tokenizer)."""
    tool_sizer = TextSizer(lambda text: counter.count(TOOL_SEPARATOR + text))
    system_prompt = TextSizer(counter.count_prompt).text(
        "[system]", f"system:{spec.seed}", spec.scaled_system_prompt_tokens
    )
    targets = spec.target_prompt_tokens()
    tool_sizes = spec.scaled_tool_tokens
    jobs = []
    for index, offset in enumerate(poisson_arrivals(spec.jps, spec.duration_s, spec.seed)):
        job_id = job_id_for(spec.seed, index)
        turns = tuple(
            TurnPlan(
                turn=turn,
                target_prompt_tokens=targets[turn - 1],
                tool_output=(
                    tool_sizer.text(tool_output_header(job_id, turn), tool_output_key(job_id, turn), tool_sizes[turn - 1])
                    if turn < spec.num_turns
                    else None
                ),
            )
            for turn in range(1, spec.num_turns + 1)
        )
        jobs.append(JobPlan(job_id=job_id, index=index, arrival_offset_s=offset, turns=turns))
    return WorkloadPlan(spec=spec, system_prompt=system_prompt, jobs=tuple(jobs))
