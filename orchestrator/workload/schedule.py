"""A workload's schedule at the token level, drawn whole from the seed (or replayed from a trace) before any
clock starts.

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from orchestrator.records.cell import ScheduleStats
from orchestrator.records.schema import RequestRecord
from orchestrator.workload.distributions import Distribution
from orchestrator.workload.spec import WorkloadSource, WorkloadSpec
from orchestrator.workload.traces.schema import Trace, load_trace


@dataclass(frozen=True)
class TurnShape:
    turn: int  # 1-based
    prompt_tokens: int  # the whole prompt: system prompt, every earlier completion and tool output
    output_tokens: int
    tool_tokens: int | None  # appended after this turn; None on the job's last turn and in a replay
    tool_time_s: float  # the tool call after this turn; 0 on the last
    is_last: bool
    shared_tokens: int  # the prompt's leading tokens other jobs send too (system prompt, a trace's shared blocks)
    # A replay's prompt is planned whole: these declared blocks (``Schedule.block_tokens`` each), then its own tail.
    prefix_blocks: tuple[str, ...] = ()

    @property
    def context_tokens(self) -> int:
        """The tokens the engine holds for this request at its end: prompt and answer (what ``max_model_len`` bounds)."""
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True)
class JobShape:
    job_id: str
    index: int  # arrival order; doubles as the job's priority for program-level FCFS
    arrival_s: float  # from the start of the arrival window
    turns: tuple[TurnShape, ...]


@dataclass(frozen=True)
class Schedule:
    source: WorkloadSource
    system_prompt_tokens: int  # 0 in a replay, whose prompts are all declared blocks and tails
    jobs: tuple[JobShape, ...]
    block_tokens: int | None = None  # a replay's declared block, scaled; None when prompts grow by appending
    dropped_jobs: tuple[str, ...] = ()  # jobs left out whole for a request over the workload's max_context

    @property
    def is_replay(self) -> bool:
        return self.block_tokens is not None

    def fingerprint(self) -> str:
        """sha256 over every arrival, size, tool time and declared block: equal fingerprints, identical
        workloads, whichever engine or tokenizer runs them."""
        digest = hashlib.sha256(f"{self.source}|{self.system_prompt_tokens}|{self.block_tokens}".encode())
        for job in self.jobs:
            digest.update(f"|{job.job_id}|{job.arrival_s!r}".encode())
            for t in job.turns:
                digest.update(f"|{t.prompt_tokens},{t.output_tokens},{t.tool_tokens},{t.tool_time_s!r}".encode())
                if t.prefix_blocks:
                    digest.update(("[" + ",".join(t.prefix_blocks) + "]").encode())
        return digest.hexdigest()

    def context_error(self, max_model_len: int) -> str | None:
        """Why the engine would refuse requests of this schedule (prompt and answer past ``max_model_len``): how many,
        in which jobs; or None: every request fits."""
        over = [(t.context_tokens, job.job_id) for job in self.jobs for t in job.turns if t.context_tokens > max_model_len]
        if not over:
            return None
        jobs = list(dict.fromkeys(job_id for _, job_id in over))
        named = ", ".join(jobs[:3]) + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")
        longest = max(tokens for tokens, _ in over)
        return (f"{len(over)} requests in {len(jobs)} of {len(self.jobs)} jobs ({named}) need more than max_model_len "
                f"{max_model_len} tokens (prompt and answer; the longest {longest}); valid: --max-model-len {longest} "
                f"or more, --max-context {max_model_len} (drops those jobs whole, counted), or a smaller workload "
                "(--scale, --tool-tokens)")

    def without_jobs_over(self, max_context: int) -> Schedule:
        """This schedule without the jobs that have a request (prompt and answer) over ``max_context`` tokens."""
        def fits(job: JobShape) -> bool:
            return all(t.context_tokens <= max_context for t in job.turns)

        dropped = tuple(job.job_id for job in self.jobs if not fits(job))
        return replace(self, jobs=tuple(job for job in self.jobs if fits(job)), dropped_jobs=self.dropped_jobs + dropped)

    def with_best_cached(self, requests: Sequence[RequestRecord]) -> tuple[RequestRecord, ...]:
        """``requests`` with a replay's theoretical best prefix hit (``declared_best_tokens``); the other
        sources' records already carry theirs (the previous turn's prompt and answer)."""
        if not self.is_replay:
            return tuple(requests)
        best = self.declared_best_tokens(requests)
        return tuple(replace(record, best_cached_tokens=best[(record.job_id, record.turn)]) for record in requests)

    def declared_best_tokens(self, requests: Iterable[RequestRecord]) -> dict[tuple[str, int], int]:
        """A replay's theoretical best prefix hit per (job, turn): the declared blocks it shares with any
        request sent before it (in send order, across jobs), in tokens. Each id always has the same parents
        (``traces/schema.py`` checks it), so a request's shared run ends at its first id not sent before."""
        blocks = {(job.job_id, turn.turn): turn.prefix_blocks for job in self.jobs for turn in job.turns}
        sent: set[str] = set()
        best = {}
        for record in sorted(requests, key=lambda record: record.sent_at):
            chain = blocks[(record.job_id, record.turn)]
            shared = next((index for index, block in enumerate(chain) if block not in sent), len(chain))
            best[(record.job_id, record.turn)] = shared * (self.block_tokens or 0)
            sent.update(chain)
        return best

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
            num_jobs_dropped=len(self.dropped_jobs),
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
    shared = prompt = spec.scaled_system_prompt_tokens
    turns = []
    for turn in range(1, num_turns + 1):
        output = draws.count("output_tokens", spec.output_tokens)
        if turn == num_turns:
            turns.append(TurnShape(turn, prompt, output, None, 0.0, True, shared))
            break
        if isinstance(spec.tool_tokens, tuple):
            tool = spec.scaled(spec.tool_tokens[turn - 1])
        else:
            tool = spec.scaled(draws.count("tool_tokens", spec.tool_tokens))
        tool_time_s = draws.seconds("tool_time_s", spec.tool_time_s)
        turns.append(TurnShape(turn, prompt, output, tool, tool_time_s, False, shared))
        prompt += output + tool
    return JobShape(job_id, index, arrival_s, tuple(turns))


def _replayed(spec: WorkloadSpec, trace: Trace) -> Schedule:
    """The trace's jobs, their arrivals rescaled from the trace's own rate to ``spec.jps`` and cut at the
    window; token counts scaled, the declared blocks kept (``scale`` x ``block_tokens`` tokens each)."""
    block = spec.scaled(trace.block_tokens)
    shared_ids = trace.shared_blocks
    stretch = trace.native_jps / spec.jps
    start = trace.jobs[0].arrival_s
    jobs = []
    for index, job in enumerate(trace.jobs):
        arrival_s = (job.arrival_s - start) * stretch
        if arrival_s >= spec.duration_s:
            break
        turns = []
        for number, turn in enumerate(job.turns, start=1):
            blocks = turn.prefix_blocks
            tail = max(0, round((turn.input_tokens - len(blocks) * trace.block_tokens) * spec.scale))
            shared = next((i for i, block_id in enumerate(blocks) if block_id not in shared_ids), len(blocks))
            last = number == len(job.turns)
            turns.append(TurnShape(number, max(1, len(blocks) * block + tail), turn.output_tokens, None,
                                   0.0 if last else turn.tool_s, last, shared * block, blocks))  # fmt: skip
        jobs.append(JobShape(job.job_id, index, arrival_s, tuple(turns)))
    return Schedule("trace", 0, tuple(jobs), block)


def schedule_for(spec: WorkloadSpec) -> Schedule:
    """The cell's whole schedule: a replayed trace, or Poisson arrivals at ``spec.jps`` inside its window with
    every job's turns drawn."""
    if spec.trace is not None:
        schedule = _replayed(spec, load_trace(spec.trace))
    else:
        arrivals = poisson_arrivals(spec.jps, spec.duration_s, spec.seed)
        jobs = tuple(_job(spec, index, arrival_s) for index, arrival_s in enumerate(arrivals))
        schedule = Schedule(spec.source, spec.scaled_system_prompt_tokens, jobs)
    return schedule if spec.max_context is None else schedule.without_jobs_over(spec.max_context)
