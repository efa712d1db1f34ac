"""The load generator: one asyncio task per job, started at its planned arrival.

The timing core (``_dispatch``) only sleeps until the next planned arrival, and starts that job's task;
payloads, parsing and records happen inside the job tasks. A job runs its turns back to back: send the
context (a replay's planned prompt), stream the completion, sleep the turn's tool time, append completion and
tool output, repeat.
"""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass

import aiohttp

from orchestrator.records.cell import RequestOptions
from orchestrator.records.schema import JobRecord, JobStatus, RequestRecord, RequestStatus, TokenCounts
from orchestrator.workload.client import Completion, CompletionClient, EpochClock, open_session
from orchestrator.workload.plan import JobPlan, TurnPlan, WorkloadPlan
from orchestrator.workload.text import TOOL_SEPARATOR


@dataclass(frozen=True)
class ShardResult:
    requests: tuple[RequestRecord, ...]
    jobs: tuple[JobRecord, ...]


@dataclass
class LoadProgress:
    """Live counters of a run, read from other threads (single int writes, so no lock is needed)."""

    jobs_total: int = 0
    jobs_finished: int = 0
    requests_in_flight: int = 0

    def plus(self, other: LoadProgress) -> LoadProgress:
        return LoadProgress(
            self.jobs_total + other.jobs_total,
            self.jobs_finished + other.jobs_finished,
            self.requests_in_flight + other.requests_in_flight,
        )


class LoadGenerator:
    """Drives one plan (or one shard of it) against one server. Plain class; ``actor.py`` wraps it for Ray."""

    def __init__(self, base_url: str, options: RequestOptions):
        self._base_url = base_url
        self._options = options
        self.progress = LoadProgress()

    def run(self, plan: WorkloadPlan, epoch_unix: float) -> ShardResult:
        """Run ``plan`` with arrival offsets counted from ``epoch_unix`` (a Unix time, shared by all shards)."""
        # The plan is large and lives the whole run: freezing it out of the collector's generations keeps
        # full collections (which walk every tracked object) from pausing the timing core for tens of ms. No
        # collection first: in a large process (a driver or a test process that imported vLLM) one takes a second of
        # CPU, and garbage frozen with the rest is only kept until the run ends.
        gc.freeze()
        try:
            return asyncio.run(self.run_async(plan, epoch_unix))
        finally:
            gc.unfreeze()

    async def run_async(self, plan: WorkloadPlan, epoch_unix: float) -> ShardResult:
        clock = EpochClock(epoch_unix)
        self.progress = LoadProgress(jobs_total=len(plan.jobs))
        async with open_session() as session:
            client = CompletionClient(self._base_url, self._options, session, clock.now)
            runner = _JobRunner(plan, client, clock, self.progress)
            outcomes = await _dispatch(plan, clock, runner.run)
        requests = tuple(record for records, _ in outcomes for record in records)
        return ShardResult(requests=requests, jobs=tuple(job for _, job in outcomes))


# The event loop's timers wake up to a millisecond late (epoll rounds its timeout up to whole
# milliseconds), so a sleep ends this much early and the rest is spent yielding to other tasks.
_SPIN_S = 0.0015


async def sleep_until(clock: EpochClock, due: float) -> None:
    """Sleep until ``due`` on ``clock`` to within a fraction of a millisecond, without blocking the loop."""
    delay = due - clock.now()
    if delay > _SPIN_S:
        await asyncio.sleep(delay - _SPIN_S)
    while clock.now() < due:
        await asyncio.sleep(0)


async def _dispatch(plan: WorkloadPlan, clock: EpochClock, run_job) -> list:
    tasks = []
    for job in plan.jobs:
        await sleep_until(clock, job.arrival_offset_s)
        tasks.append(asyncio.create_task(run_job(job, job.arrival_offset_s)))
    return await asyncio.gather(*tasks)


class _JobRunner:
    def __init__(self, plan: WorkloadPlan, client: CompletionClient, clock: EpochClock, progress: LoadProgress):
        self._plan = plan
        self._spec = plan.spec
        self._client = client
        self._clock = clock
        self._progress = progress

    async def run(self, job: JobPlan, arrival_at: float) -> tuple[list[RequestRecord], JobRecord]:
        try:
            return await self._run_turns(job, arrival_at)
        finally:
            self._progress.jobs_finished += 1

    async def _run_turns(self, job: JobPlan, arrival_at: float) -> tuple[list[RequestRecord], JobRecord]:
        """Every turn of ``job``; stops at the first failed turn, which decides the job's status."""
        job_deadline = arrival_at + self._spec.job_timeout_s
        context = self._plan.system_prompt
        due = arrival_at
        previous: RequestRecord | None = None
        records: list[RequestRecord] = []
        for turn in job.turns:
            await sleep_until(self._clock, due)
            prompt = context if turn.prompt is None else turn.prompt
            record, completion = await self._send(job, turn, prompt, due, previous, job_deadline)
            records.append(record)
            if not record.status.is_ok:
                ended = JobStatus(record.status.value)
                return records, JobRecord.ended(job.job_id, job.index, ended, arrival_at, records)
            if turn.prompt is None:  # a replay plans every prompt whole and never reads the context
                context += completion.text + TOOL_SEPARATOR + (turn.tool_output or "")
            due = completion.finished_at + turn.tool_time_s
            previous = record
        return records, JobRecord.ended(job.job_id, job.index, JobStatus.COMPLETED, arrival_at, records)

    async def _send(self, job, turn: TurnPlan, prompt, due, previous, job_deadline):
        body = self._client.body(prompt, turn.output_tokens, job.job_id, job.index, turn.turn, turn.is_last)
        sent_at = self._clock.now()
        budget = min(self._spec.request_timeout_s, job_deadline - sent_at)
        completion: Completion | None = None
        error, replica = None, 0
        self._progress.requests_in_flight += 1
        try:
            completion = await asyncio.wait_for(self._client.complete(body), timeout=max(budget, 0.0))
            status = RequestStatus.OK
        except TimeoutError:
            status, error = RequestStatus.TIMEOUT, f"no complete answer within {budget:.1f} s"
        except (aiohttp.ClientError, RuntimeError, ValueError) as failure:
            status, error = RequestStatus.ERROR, f"{type(failure).__name__}: {failure}"[:500]
            replica = getattr(failure, "replica", 0)
        finally:
            self._progress.requests_in_flight -= 1
        counts = (TokenCounts(completion.prompt_tokens, completion.cached_tokens, completion.completion_tokens)
                  if completion else None)  # fmt: skip
        record = RequestRecord.of_turn(
            job.job_id, job.index, turn.turn, turn.is_last, turn.target_prompt_tokens, previous, status=status,
            scheduled_at=due, sent_at=sent_at, first_token_at=completion.first_token_at if completion else None,
            finished_at=completion.finished_at if completion else self._clock.now(), counts=counts, error=error,
            replica=completion.replica if completion else replica,
        )  # fmt: skip
        return record, completion

