"""The workload's clients in the simulation (pure): each agent job sends its turns one after another, a tool
call apart, and gives up on a turn at its deadline, as the load generator runs them; they write the request and
job records on the cell's clock (zero = start of the arrival window). Nothing here draws a random number: the
schedule is the workload's, drawn before the run, so the same cell always gives the same records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.mechanisms.request import SimRequest
from orchestrator.records.schema import JobRecord, JobStatus, RequestRecord, RequestStatus, TokenCounts
from orchestrator.workload.schedule import JobShape, Schedule, TurnShape
from orchestrator.workload.spec import WorkloadSpec


@dataclass
class Job:
    shape: JobShape
    deadline: float
    turn: int = 0
    records: list[RequestRecord] = field(default_factory=list)

    @property
    def job_id(self) -> str:
        return self.shape.job_id

    @property
    def index(self) -> int:
        return self.shape.index


class Clients:
    """The workload's agent jobs, as the load generator runs them: each sends its turns one after another, a tool call
    apart, and gives up on a turn at its deadline. They write the request and job records, on the cell's clock.

    ``num_on_the_way`` counts the turns decided but not yet in the engine (a tool call running, a request on the wire):
    the simulation's ``SendTurn`` and ``ReachEngine`` events pending."""

    def __init__(self, workload: WorkloadSpec, schedule: Schedule, request_overhead_s: float, block_size: int):
        self.workload = workload
        self._schedule = schedule
        self._request_overhead_s = request_overhead_s
        self._block_size = block_size
        self._job_of: dict[str, Job] = {}
        self.requests: list[RequestRecord] = []
        self.jobs: list[JobRecord] = []
        self.num_on_the_way = 0

    def start(self) -> list[tuple[float, Job]]:
        """Every job, with when its first turn is sent: the schedule's arrival times."""
        sends = []
        for shape in self._schedule.jobs:
            job = Job(shape, shape.arrival_s + self.workload.job_timeout_s)
            self._job_of[job.job_id] = job
            sends.append((shape.arrival_s, job))
        self.num_on_the_way = len(sends)
        return sends

    def send(self, job: Job, due: float) -> tuple[SimRequest, float]:
        """The job's next turn, sent at ``due``, and its deadline (the request's own, or the job's if sooner)."""
        job.turn += 1
        turn = job.shape.turns[job.turn - 1]
        shared_blocks = turn.shared_tokens // self._block_size
        request = SimRequest(
            request_id=f"{job.job_id}-t{job.turn}",
            job_id=job.job_id,
            job_index=job.index,
            turn=job.turn,
            is_last=turn.is_last,
            prompt_tokens=turn.prompt_tokens,
            arrival=due + self._request_overhead_s,
            output_tokens=turn.output_tokens,
            shared_blocks=shared_blocks,
            shared_segments=self._shared_segments(turn) if self._schedule.is_replay else (),
            max_job_hit_blocks=self._job_hit_blocks(job, shared_blocks),
            due_at=due,
        )
        return request, min(due + self.workload.request_timeout_s, job.deadline)

    def _shared_segments(self, turn: TurnShape) -> tuple[tuple[str, int], ...]:
        """A replay's declared shared blocks as the pool caches them: each with the engine blocks whose last token
        lies in it (none, where a declared block is smaller than an engine block and holds no block's end)."""
        size, block = self._schedule.block_tokens, self._block_size
        shared = turn.prefix_blocks[:turn.shared_tokens // size]
        segments = ((block_id, (size * (k + 1)) // block - (size * k) // block) for k, block_id in enumerate(shared))
        return tuple((block_id, count) for block_id, count in segments if count)

    def _job_hit_blocks(self, job: Job, shared_blocks: int) -> int | None:
        """A replay's prompt shares with its job's previous one only the blocks both declare (its answer is
        not in the next prompt); a prompt that appends to the previous one can use the whole chain."""
        if not self._schedule.is_replay or job.turn == 1:
            return None
        previous, current = job.shape.turns[job.turn - 2].prefix_blocks, job.shape.turns[job.turn - 1].prefix_blocks
        common = next((i for i, (a, b) in enumerate(zip(previous, current)) if a != b),
                      min(len(previous), len(current)))  # fmt: skip
        return max(0, common * self._schedule.block_tokens // self._block_size - shared_blocks)

    def on_finished(self, request: SimRequest, at: float) -> list[tuple[float, Job]]:
        """The answer is complete at ``at``: the job ends (no send), or its tool call runs and the next turn is sent
        after it."""
        job = self._job_of[request.job_id]
        self._record(job, request, RequestStatus.OK, at, None)
        if request.is_last:
            self._end_job(job, JobStatus.COMPLETED)
            return []
        self.num_on_the_way += 1
        return [(at + job.shape.turns[request.turn - 1].tool_time_s, job)]

    def on_timed_out(self, request: SimRequest, deadline_at: float) -> None:
        job = self._job_of[request.job_id]
        self._record(job, request, RequestStatus.TIMEOUT, deadline_at, "no complete answer before the deadline")
        self._end_job(job, JobStatus.TIMEOUT)

    def _record(self, job: Job, request: SimRequest, status: RequestStatus, finished_at: float, error: str | None):
        previous = job.records[-1] if job.records else None
        counts = TokenCounts(request.prompt_tokens, request.cached_tokens, request.num_output)
        record = RequestRecord.of_turn(
            job.job_id, job.index, request.turn, request.is_last, request.prompt_tokens, previous, status=status,
            scheduled_at=request.due_at, sent_at=request.due_at,  # a simulated client is never late
            first_token_at=request.first_token_at, finished_at=finished_at, counts=counts, error=error,
            replica=request.replica,
        )  # fmt: skip
        job.records.append(record)
        self.requests.append(record)

    def _end_job(self, job: Job, status: JobStatus) -> None:
        self.jobs.append(JobRecord.ended(job.job_id, job.index, status, job.shape.arrival_s, job.records))
