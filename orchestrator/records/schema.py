"""Flat per-request and per-job rows: the raw measurements of a cell, written as parquet.

All ``*_at`` fields are seconds on one clock whose zero is the cell's start epoch (shared by every client
actor of the cell). Latencies are measured from the *scheduled* time, not the send time, so a client that
falls behind shows up as latency and as ``dispatch_lag_s`` instead of being hidden (no coordinated omission).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import NamedTuple

SCHEMA_VERSION = 1
# The response header that names the replica which served a request, in a cell of several behind a router.
REPLICA_HEADER = "x-kvsweep-replica"


class RequestStatus(str, enum.Enum):
    OK = "ok"
    TIMEOUT = "timeout"  # the per-request or per-job deadline passed
    ERROR = "error"  # HTTP or protocol failure

    @property
    def is_ok(self) -> bool:
        return self is RequestStatus.OK


class JobStatus(str, enum.Enum):
    COMPLETED = "completed"
    TIMEOUT = "timeout"
    ERROR = "error"

    @property
    def is_completed(self) -> bool:
        return self is JobStatus.COMPLETED


class TokenCounts(NamedTuple):
    """What a server counted of an answered request: its prompt, the prefix-cache hit of it, its completion."""

    prompt: int | None
    cached: int | None
    completion: int | None


@dataclass(frozen=True)
class RequestRecord:
    job_id: str
    job_index: int  # the job's place in the arrival order, from 0
    turn: int  # from 1
    is_last: bool  # the job's last turn
    status: RequestStatus
    scheduled_at: float  # when the plan says the request is due (arrival, or previous finish + tool time)
    sent_at: float  # when the HTTP request was actually issued
    first_token_at: float | None  # first streamed text chunk
    finished_at: float | None  # stream end (or when the failure was seen)
    target_prompt_tokens: int  # what the plan aimed for
    prompt_tokens: int | None  # what the server counted (usage)
    cached_tokens: int | None  # prefix-cache hit the server reported (usage.prompt_tokens_details)
    best_cached_tokens: int | None  # previous turn's prompt + completion: the most a prefix cache can hit
    completion_tokens: int | None
    error: str | None  # what went wrong, for a request that did not end ok
    replica: int = 0  # which of the cell's replicas served it (0 in a cell of one)
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def of_turn(cls, job_id: str, job_index: int, turn: int, is_last: bool, target_prompt_tokens: int,
                previous: RequestRecord | None, *, status: RequestStatus, scheduled_at: float, sent_at: float,
                first_token_at: float | None, finished_at: float | None, counts: TokenCounts | None,
                error: str | None, replica: int) -> RequestRecord:  # fmt: skip
        """A turn's record, as every client builds it: the server's token counts where its answer ended ok
        (``counts``), and the turn's best possible prefix hit after its job's ``previous`` turn."""
        ok = status is RequestStatus.OK and counts is not None
        return cls(job_id=job_id, job_index=job_index, turn=turn, is_last=is_last, status=status,
                   scheduled_at=scheduled_at, sent_at=sent_at, first_token_at=first_token_at, finished_at=finished_at,
                   target_prompt_tokens=target_prompt_tokens, prompt_tokens=counts.prompt if ok else None,
                   cached_tokens=counts.cached if ok else None, best_cached_tokens=best_cached_after(previous),
                   completion_tokens=counts.completion if ok else None, error=error, replica=replica)  # fmt: skip

    @property
    def dispatch_lag_s(self) -> float:
        return self.sent_at - self.scheduled_at

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.scheduled_at

    @property
    def latency_s(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.scheduled_at


def best_cached_after(previous: RequestRecord | None) -> int | None:
    """A turn's theoretical best prefix hit: everything its job's previous turn sent and received (0 for a
    job's first turn; None where the previous turn's counts are unknown). A replay's is its declared shared
    blocks instead (``workload.schedule.Schedule.with_best_cached``)."""
    if previous is None:
        return 0
    if previous.prompt_tokens is None or previous.completion_tokens is None:
        return None
    return previous.prompt_tokens + previous.completion_tokens


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    job_index: int
    status: JobStatus
    arrival_at: float  # scheduled arrival of turn 1
    finished_at: float | None  # end of the last turn, or of the failing one
    num_turns_completed: int
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def ended(cls, job_id: str, job_index: int, status: JobStatus, arrival_at: float,
              requests: Sequence[RequestRecord]) -> JobRecord:  # fmt: skip
        """A job's record once it ended, for the load generator and the simulated clients alike: at its last request's
        end, with the turns that ended ok."""
        return cls(job_id=job_id, job_index=job_index, status=status, arrival_at=arrival_at,
                   finished_at=requests[-1].finished_at if requests else None,
                   num_turns_completed=sum(request.status.is_ok for request in requests))  # fmt: skip

    @property
    def jct_s(self) -> float | None:
        """Job completion time; only a completed job has one."""
        if not self.status.is_completed or self.finished_at is None:
            return None
        return self.finished_at - self.arrival_at


def to_row(record: RequestRecord | JobRecord) -> dict:
    """The record as a flat row: its fields plus its derived durations, enums as their values."""
    row = {field.name: getattr(record, field.name) for field in fields(record)}
    row = {key: value.value if isinstance(value, enum.Enum) else value for key, value in row.items()}
    if isinstance(record, RequestRecord):
        row |= {"dispatch_lag_s": record.dispatch_lag_s, "ttft_s": record.ttft_s, "latency_s": record.latency_s}
    else:
        row["jct_s"] = record.jct_s
    return row
