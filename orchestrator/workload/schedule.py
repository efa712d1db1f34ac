"""A workload's schedule at the token level, drawn whole from the seed before any clock starts.

When each job arrives, and for each of its turns: the prompt's length, the completion's length, the
tool output appended after it and the tool call's time. Every engine runs the same schedule: the HTTP
load generator renders it as text of those sizes (``plan.py``), the simulator consumes it directly, so
every policy of a comparison sees the identical jobs.

Each drawn quantity of a job has its own random stream, seeded by the cell's seed, the job and the
quantity's name: changing how turns are drawn never shifts a job's tool times, and adding a job never
shifts another's.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from orchestrator.workload.distributions import Distribution
from orchestrator.workload.spec import WorkloadSource, WorkloadSpec


@dataclass(frozen=True)
class TurnShape:
    turn: int  # 1-based
    prompt_tokens: int  # the whole prompt: system prompt, every earlier completion and tool output
    output_tokens: int
    tool_tokens: int | None  # appended after this turn; None on the job's last turn
    tool_time_s: float  # the tool call after this turn; 0 on the last

    @property
    def is_last(self) -> bool:
        return self.tool_tokens is None


@dataclass(frozen=True)
class JobShape:
    job_id: str
    index: int  # arrival order; doubles as the job's priority for program-level FCFS
    arrival_s: float  # from the start of the arrival window
    turns: tuple[TurnShape, ...]


@dataclass(frozen=True)
class ScheduleStats:
    num_jobs: int
    num_requests: int
    mean_turns: float
    max_turns: int
    mean_final_prompt_tokens: float
    mean_output_tokens: float
    mean_tool_time_s: float  # over tool calls (a job's last turn has none)


@dataclass(frozen=True)
class Schedule:
    source: WorkloadSource
    system_prompt_tokens: int
    jobs: tuple[JobShape, ...]

    def fingerprint(self) -> str:
        """sha256 over every arrival, size and tool time: equal fingerprints, identical workloads, whichever
        engine or tokenizer runs them."""
        digest = hashlib.sha256(f"{self.source}|{self.system_prompt_tokens}".encode())
        for job in self.jobs:
            digest.update(f"|{job.job_id}|{job.arrival_s!r}".encode())
            for t in job.turns:
                digest.update(f"|{t.prompt_tokens},{t.output_tokens},{t.tool_tokens},{t.tool_time_s!r}".encode())
        return digest.hexdigest()

    def stats(self) -> ScheduleStats:
        turns = [turn for job in self.jobs for turn in job.turns]
        tool_times = [turn.tool_time_s for turn in turns if not turn.is_last]
        jobs = max(1, len(self.jobs))
        return ScheduleStats(
            num_jobs=len(self.jobs),
            num_requests=len(turns),
            mean_turns=len(turns) / jobs,
            max_turns=max((len(job.turns) for job in self.jobs), default=0),
            mean_final_prompt_tokens=sum(job.turns[-1].prompt_tokens for job in self.jobs) / jobs,
            mean_output_tokens=sum(turn.output_tokens for turn in turns) / max(1, len(turns)),
            mean_tool_time_s=sum(tool_times) / max(1, len(tool_times)),
        )


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


class _Draws:
    """One job's draws: a stream per quantity, seeded by the cell's seed, the job and the quantity."""

    def __init__(self, seed: int, job_id: str):
        self._seed, self._job_id = seed, job_id
        self._streams: dict[str, random.Random] = {}

    def count(self, quantity: str, value: int | Distribution) -> int:
        if isinstance(value, int):
            return value
        return max(1, round(value.sample(self._stream(quantity))))

    def seconds(self, quantity: str, value: float | Distribution) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        return value.sample(self._stream(quantity))

    def _stream(self, quantity: str) -> random.Random:
        if quantity not in self._streams:
            # A string seed is hashed with sha512, the same on every machine and Python process.
            self._streams[quantity] = random.Random(f"{self._seed}:{self._job_id}:{quantity}")
        return self._streams[quantity]


def _job(spec: WorkloadSpec, index: int, arrival_s: float) -> JobShape:
    job_id = job_id_for(spec.seed, index)
    draws = _Draws(spec.seed, job_id)
    num_turns = draws.count("turns", spec.num_turns)
    prompt = spec.scaled_system_prompt_tokens
    turns = []
    for turn in range(1, num_turns + 1):
        output = draws.count("output_tokens", spec.output_tokens)
        if turn == num_turns:
            turns.append(TurnShape(turn, prompt, output, None, 0.0))
            break
        if isinstance(spec.tool_tokens, tuple):
            tool = spec.scaled(spec.tool_tokens[turn - 1])
        else:
            tool = spec.scaled(draws.count("tool_tokens", spec.tool_tokens))
        turns.append(TurnShape(turn, prompt, output, tool, draws.seconds("tool_time_s", spec.tool_time_s)))
        prompt += output + tool
    return JobShape(job_id, index, arrival_s, tuple(turns))


def schedule_for(spec: WorkloadSpec) -> Schedule:
    """The cell's whole schedule: Poisson arrivals at ``spec.jps`` inside its window, every job's turns."""
    arrivals = poisson_arrivals(spec.jps, spec.duration_s, spec.seed)
    jobs = tuple(_job(spec, index, arrival_s) for index, arrival_s in enumerate(arrivals))
    return Schedule(spec.source, spec.scaled_system_prompt_tokens, jobs)
