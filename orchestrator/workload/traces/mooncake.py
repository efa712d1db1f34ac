"""Mooncake-format traces into the project's trace format (``schema``). Users download the traces themselves.

JSON Lines of requests, ``{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}`` (Mooncake's
published traces, 512-token blocks; AIPerf and Dynamo read the same lines). ``hash_ids`` name the prompt's blocks,
chained; ids past the prompt's last full block (its partial tail) are dropped, since a prefix cache keeps full blocks
only.

Whose request is whose:
- lines that carry a ``session_id`` are the turns of one job, in file order;
- the others (Mooncake's FAST'25 traces carry none) are grouped into sessions recovered from their block chains
  (``sessions``: a request whose blocks start with a session's latest prompt, for at least ``min_shared`` of them,
  is its next turn), in timestamp order; the header says how many sessions were found and of what lengths.
  ``recover=False`` keeps the plain reading: each such request is a job of one turn.

A turn's tool time is the next turn's ``delay`` (ms) where given, else the gap between the two timestamps, which also
holds the original answer's service time (the format does not record it): an upper bound, said so in the header.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.workload.traces.schema import (
    TraceFormatError,
    TraceJob,
    TraceTurn,
    check_chain,
    json_object,
    number_field,
)
from orchestrator.workload.traces.sessions import DEFAULT_MIN_SHARED, describe_sessions, recover_sessions
from orchestrator.workload.traces.source_files import file_lines

MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class _Request:
    line: int
    payload: dict
    timestamp_s: float | None
    turn: TraceTurn  # its tool time is set once the next turn of its job is known


def read_mooncake(path: Path, block_tokens: int = MOONCAKE_BLOCK_TOKENS, recover: bool = True,
                  min_shared: float = DEFAULT_MIN_SHARED) -> tuple[list[TraceJob], dict]:  # fmt: skip
    """The jobs of a Mooncake-format file, and what the header should say about how they were read."""
    source = str(path)
    requests = _requests(path, block_tokens)
    named: dict[str, list[_Request]] = {}
    anonymous: list[_Request] = []
    for request in requests:
        session = request.payload.get("session_id")
        if session is None:
            anonymous.append(request)
        else:
            named.setdefault(f"s-{session}", []).append(request)
    anonymous.sort(key=lambda request: request.timestamp_s or 0.0)  # stable: file order among equal times
    if recover:
        found = recover_sessions([request.turn.prefix_blocks for request in anonymous], min_shared)
    else:
        found = [[index] for index in range(len(anonymous))]
    groups = list(named.items()) + [(f"r{anonymous[s[0]].line}", [anonymous[i] for i in s]) for s in found]
    groups.sort(key=lambda group: group[1][0].line)
    used_timestamps = False
    jobs = []
    for job_id, turns in groups:
        gaps = [_gap(turn, following, source) for turn, following in zip(turns, turns[1:])]
        used_timestamps |= any(from_timestamps for _, from_timestamps in gaps)
        tool_times = [gap for gap, _ in gaps] + [0.0]
        arrival = turns[0].timestamp_s or 0.0
        job_turns = tuple(replace(turn.turn, tool_s=tool_s) for turn, tool_s in zip(turns, tool_times))
        jobs.append(TraceJob(job_id, arrival, job_turns))
    jobs.sort(key=lambda job: job.arrival_s)  # stable: file order among equal arrivals
    notes: dict = {"format": "mooncake", "block_tokens": block_tokens}
    if anonymous:
        notes["sessions"] = (describe_sessions(found, min_shared) if recover else
                             "each request without a session_id is a job of one turn")  # fmt: skip
    if used_timestamps:
        notes["tool_s"] = "gap between the turns' timestamps (includes the original answer's service time)"
    return jobs, notes


def _requests(path: Path, block_tokens: int) -> list[_Request]:
    """Every request of the file, checked, in file order (ids are checked to be chained across the whole file)."""
    source = str(path)
    parents: dict = {}
    requests = []
    for number, text in enumerate(file_lines(path), start=1):
        if not text.strip():
            continue
        line = json_object(text, source, number)
        input_tokens = number_field(line, "input_length", source, number, int, minimum=1)
        output_tokens = number_field(line, "output_length", source, number, int, minimum=1)
        hash_ids = line.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(isinstance(h, (int, str)) for h in hash_ids):
            raise TraceFormatError(source, number, "hash_ids", f"got {hash_ids!r}; valid: a list of block ids")
        blocks = tuple(str(h) for h in hash_ids[: input_tokens // block_tokens])
        check_chain(blocks, "hash_ids", source, number, parents)
        timestamp = number_field(line, "timestamp", source, number, float) / 1000 if "timestamp" in line else None
        requests.append(_Request(number, line, timestamp, TraceTurn(input_tokens, output_tokens, 0.0, blocks)))
    if not requests:
        raise TraceFormatError(source, 1, "json", "no requests in the file")
    return requests


def _gap(request: _Request, following: _Request, source: str) -> tuple[float, bool]:
    """The tool time before ``following`` (seconds), and whether it came from the timestamps."""
    if "delay" in following.payload:
        return number_field(following.payload, "delay", source, following.line, float) / 1000, False
    start = number_field(request.payload, "timestamp", source, request.line, float)
    end = number_field(following.payload, "timestamp", source, following.line, float, minimum=start)
    return (end - start) / 1000, True
