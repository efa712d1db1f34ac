"""The project's agent-trace format, ``kvsweep-trace/1``: one JSON object per line (pure; reading a file is
``read_trace_file``, the one function here that touches the filesystem).

Line 1 is the header, every other line one job::

    {"schema": "kvsweep-trace/1", "name": "agent-small", "block_tokens": 64, "generator": {...}}
    {"job": "j0001", "arrival_s": 0.0, "turns": [
        {"input_tokens": 700, "output_tokens": 24, "tool_s": 0.4, "prefix_blocks": ["sysA-0", "sysA-1", "j0001-0"]},
        ...]}

- ``arrival_s``: the job's first request, seconds from the trace's start; jobs are sorted by it.
- ``input_tokens``: the whole prompt of the turn (not the tokens added since the previous turn).
- ``output_tokens``: the answer's exact length.
- ``tool_s``: the client's time between this turn's answer and its next request (tool call and thinking);
  0 or absent on a job's last turn.
- ``prefix_blocks``: the ids of the prompt's leading full blocks of ``block_tokens`` tokens, chained as
  vLLM's prefix cache chains them: two requests share exactly the blocks where their lists agree from the
  start, and the rest of each prompt is its own. An id therefore always has the same position and the same
  parent; that is checked, and so is ``len(prefix_blocks) * block_tokens <= input_tokens``.

A malformed file fails with one line, ``<file>:<line>: <field>: <problem>``, before anything runs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.paths import PROJECT_ROOT

SCHEMA = "kvsweep-trace/1"


class TraceFormatError(ValueError):
    """One line naming the file, the line and the field."""

    def __init__(self, source: str, line: int, field: str, problem: str):
        # Line 0: the file as a whole (it cannot be read, or its bytes changed).
        super().__init__(f"{source}:{line}: {field}: {problem}" if line else f"{source}: {field}: {problem}")


@dataclass(frozen=True)
class TraceTurn:
    input_tokens: int
    output_tokens: int
    tool_s: float
    prefix_blocks: tuple[str, ...]


@dataclass(frozen=True)
class TraceJob:
    job_id: str
    arrival_s: float
    turns: tuple[TraceTurn, ...]


@dataclass(frozen=True)
class Trace:
    name: str
    block_tokens: int
    jobs: tuple[TraceJob, ...]
    sha256: str  # of the file's bytes: what a cell's key records

    @cached_property
    def shared_blocks(self) -> frozenset[str]:
        """The block ids more than one job sends: shared prefixes (a system prompt, tool definitions). Walked once
        per trace (``load_trace`` keeps one per file), though every cell's schedule and simulator ask."""
        owners: dict[str, str] = {}
        shared = set()
        for job in self.jobs:
            for turn in job.turns:
                for block in turn.prefix_blocks:
                    if owners.setdefault(block, job.job_id) != job.job_id:
                        shared.add(block)
        return frozenset(shared)

    @property
    def native_jps(self) -> float:
        """The trace's own mean arrival rate: jobs after the first over the span of their arrivals."""
        span = self.jobs[-1].arrival_s - self.jobs[0].arrival_s
        return (len(self.jobs) - 1) / span if len(self.jobs) > 1 and span > 0 else 1.0


def parse_trace(data: bytes, source: str) -> Trace:
    """The trace in ``data`` (a file's bytes; ``source`` names it in errors). Raises ``TraceFormatError``."""
    lines = data.decode("utf-8", errors="replace").splitlines()
    if not lines:
        raise TraceFormatError(source, 1, "schema", f"the file is empty; a trace starts with a {SCHEMA} header line")
    header = json_object(lines[0], source, 1)
    if header.get("schema") != SCHEMA:
        raise TraceFormatError(source, 1, "schema", f"got {header.get('schema')!r}, valid: {SCHEMA!r}")
    block_tokens = number_field(header, "block_tokens", source, 1, int, minimum=1)
    parents: dict[str, tuple[int, str | None, int]] = {}  # id -> (position, parent id, line it was first seen)
    jobs: list[TraceJob] = []
    seen_jobs: set[str] = set()
    for number, text in enumerate(lines[1:], start=2):
        if not text.strip():
            continue
        job = _job(json_object(text, source, number), source, number, block_tokens, parents)
        if job.job_id in seen_jobs:
            raise TraceFormatError(source, number, "job", f"{job.job_id!r} appears twice")
        if jobs and job.arrival_s < jobs[-1].arrival_s:
            raise TraceFormatError(source, number, "arrival_s",
                                   f"{job.arrival_s:g} is before the previous job's {jobs[-1].arrival_s:g}; "
                                   "valid: jobs sorted by arrival")  # fmt: skip
        seen_jobs.add(job.job_id)
        jobs.append(job)
    if not jobs:
        raise TraceFormatError(source, len(lines) + 1, "job", "the trace has a header and no jobs")
    name = str(header.get("name", Path(source).stem))
    return Trace(name, block_tokens, tuple(jobs), hashlib.sha256(data).hexdigest())


def read_trace_file(path: str | Path) -> Trace:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise TraceFormatError(str(path), 0, "file", error.strerror or str(error)) from None
    return parse_trace(data, str(path))


def dump_trace(trace_name: str, block_tokens: int, jobs: list[TraceJob], generator: dict | None = None) -> bytes:
    """The file for ``jobs``: the header, then one compact line per job (what ``parse_trace`` reads back)."""
    header = {"schema": SCHEMA, "name": trace_name, "block_tokens": block_tokens}
    if generator is not None:
        header["generator"] = generator
    lines = [json.dumps(header, separators=(",", ":"))]
    for job in jobs:
        turns = [{"input_tokens": t.input_tokens, "output_tokens": t.output_tokens, "tool_s": t.tool_s,
                  "prefix_blocks": list(t.prefix_blocks)} for t in job.turns]  # fmt: skip
        lines.append(json.dumps({"job": job.job_id, "arrival_s": job.arrival_s, "turns": turns}, separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode()


def json_object(text: str, source: str, line: int) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise TraceFormatError(source, line, "json", f"{error.msg} at column {error.colno}") from None
    if not isinstance(value, dict):
        raise TraceFormatError(source, line, "json", f"a line is one JSON object, got {type(value).__name__}")
    return value


def number_field(payload: dict, field: str, source: str, line: int, kind: type, minimum: float = 0, default=None):
    value = payload.get(field, default)
    valid = "an integer" if kind is int else "a number"
    if value is None:
        raise TraceFormatError(source, line, field, f"missing; valid: {valid} >= {minimum:g}")
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not is_number or (kind is int and not float(value).is_integer()):
        raise TraceFormatError(source, line, field, f"got {value!r}; valid: {valid} >= {minimum:g}")
    if value < minimum:
        raise TraceFormatError(source, line, field, f"got {value!r}; valid: {valid} >= {minimum:g}")
    return kind(value)


def _job(payload: dict, source: str, line: int, block_tokens: int, parents: dict) -> TraceJob:
    job_id = payload.get("job")
    if not isinstance(job_id, str) or not job_id:
        raise TraceFormatError(source, line, "job", f"got {job_id!r}; valid: a non-empty string id")
    arrival = number_field(payload, "arrival_s", source, line, float)
    raw_turns = payload.get("turns")
    if not isinstance(raw_turns, list) or not raw_turns:
        raise TraceFormatError(source, line, "turns", f"got {raw_turns!r}; valid: a non-empty list of turns")
    turns = []
    for index, raw in enumerate(raw_turns):
        where = f"turns[{index}]"
        if not isinstance(raw, dict):
            raise TraceFormatError(source, line, where, f"got {raw!r}; valid: an object")
        input_tokens = nested_number_field(raw, "input_tokens", where, source, line, int, 1)
        output_tokens = nested_number_field(raw, "output_tokens", where, source, line, int, 1)
        tool_s = nested_number_field(raw, "tool_s", where, source, line, float, 0, default=0.0)
        blocks = raw.get("prefix_blocks", [])
        if not isinstance(blocks, list):
            raise TraceFormatError(source, line, f"{where}.prefix_blocks",
                                   f"got {blocks!r}; valid: a list of block ids")  # fmt: skip
        blocks = tuple(str(block) for block in blocks)
        if len(blocks) * block_tokens > input_tokens:
            problem = f"{len(blocks)} blocks of {block_tokens} tokens exceed input_tokens {input_tokens}"
            raise TraceFormatError(source, line, f"{where}.prefix_blocks", problem)
        check_chain(blocks, f"{where}.prefix_blocks", source, line, parents)
        turns.append(TraceTurn(input_tokens, output_tokens, tool_s, blocks))
    return TraceJob(job_id, arrival, tuple(turns))


def nested_number_field(raw: dict, name: str, where: str, source: str, line: int, kind: type, minimum: float,
                        default=None):  # fmt: skip
    """``number_field`` of an object inside a line (a turn, a request), named in errors by its path ``where``."""
    try:
        return number_field(raw, name, source, line, kind, minimum, default)
    except TraceFormatError as error:
        raise TraceFormatError(source, line, f"{where}.{name}", str(error).split(f"{name}: ", 1)[1]) from None


def check_chain(blocks: tuple[str, ...], field: str, source: str, line: int, parents: dict) -> None:
    parent = None
    for position, block in enumerate(blocks):
        known = parents.setdefault(block, (position, parent, line))
        if known[:2] != (position, parent):
            raise TraceFormatError(source, line, field,
                                   f"block {block!r} at position {position} after {parent!r}, "
                                   f"but line {known[2]} has it "
                                   f"at position {known[0]} after {known[1]!r}; ids are chained prefixes")  # fmt: skip
        parent = block


class TraceRef(BaseModel):
    """A cell's trace: where to read it, and the sha256 of the bytes it was set up with (the cell's key holds
    the hash, not the path, so a copy of the file elsewhere is the same cell).

    A trace inside the project is named relative to the project's root, so a Ray job's workers find it in
    their own copy of the working directory; any other path must be readable at the same place on every node.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    @classmethod
    def of(cls, path: str | Path) -> TraceRef:
        """A reference to the trace at ``path``, read and checked now (raises ``TraceFormatError``)."""
        absolute = Path(path).resolve()
        inside = absolute.is_relative_to(PROJECT_ROOT)
        named = absolute.relative_to(PROJECT_ROOT).as_posix() if inside else str(absolute)
        return cls(path=named, sha256=read_trace_file(absolute).sha256)

    @property
    def file(self) -> Path:
        return PROJECT_ROOT / self.path  # an absolute path stays itself


@lru_cache(maxsize=8)
def load_trace(ref: TraceRef) -> Trace:
    """The trace ``ref`` names, refused with one line if the file changed since the sweep was set up."""
    trace = read_trace_file(ref.file)
    if trace.sha256 != ref.sha256:
        raise TraceFormatError(str(ref.file), 0, "sha256",
                               f"the file changed since the sweep was set up ({trace.sha256[:12]}, expected "
                               f"{ref.sha256[:12]}); restore it or set the sweep up again")  # fmt: skip
    return trace
