"""Importers: public agent-trace formats into the project's own (``kvsweep-trace/1``). Users download the
traces themselves; nothing is fetched here. Each importer reads its format as published and says how it
reads what the format leaves open:

- ``mooncake``: JSON Lines of requests, ``{"timestamp": ms, "input_length": n, "output_length": n,
  "hash_ids": [...]}`` (Mooncake's published traces, 512-token blocks; AIPerf and Dynamo read the same
  lines). ``hash_ids`` name the prompt's blocks, chained; ids past the prompt's last full block (its partial
  tail) are dropped, since a prefix cache keeps full blocks only. Lines that carry a ``session_id`` are the
  turns of one job, in file order; without one every request is a job of one turn. A turn's tool time is
  the next turn's ``delay`` (ms) where given, else the gap between the two timestamps, which also holds the
  original answer's service time: an upper bound, said so in the header.
- ``swe-agent``: SWE-agent trajectory files (``<instance>.traj``, one JSON document each; mini-swe-agent's
  ``.traj.json`` has the same ``trajectory`` steps). One file is one job; each step one turn: its prompt is
  the system and instance messages plus every earlier step's response and observation, its answer the
  step's response, its tool time the step's ``execution_time``. Token counts come from ``--tokenizer`` (a
  Hugging Face tokenizer directory) or, without one, from 4 characters per token, said so in the header.
  The system message's full blocks are shared by every job that has the same one. The files carry no
  arrival times: jobs arrive as a Poisson process at ``--jps`` (seeded), in file-name order.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterable
from pathlib import Path

from orchestrator.workload.traces.schema import (
    TraceFormatError,
    TraceJob,
    TraceTurn,
    check_chain,
    json_object,
    number_field,
)

MOONCAKE_BLOCK_TOKENS = 512
CHARS_PER_TOKEN = 4


def read_mooncake(path: Path, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> tuple[list[TraceJob], dict]:
    """The jobs of a Mooncake-format file, and what the header should say about how they were read."""
    source = str(path)
    sessions: dict[str, list[tuple[int, dict]]] = {}
    parents: dict = {}
    used_timestamps = False
    for number, text in enumerate(_lines(path), start=1):
        if not text.strip():
            continue
        line = json_object(text, source, number)
        session = line.get("session_id")
        sessions.setdefault(f"s-{session}" if session is not None else f"r{number}", []).append((number, line))
    jobs = []
    for job_id, requests in sessions.items():
        turns = []
        first_line = requests[0][0]
        arrival = number_field(requests[0][1], "timestamp", source, first_line, float, default=0.0) / 1000
        for index, (number, line) in enumerate(requests):
            input_tokens = number_field(line, "input_length", source, number, int, minimum=1)
            output_tokens = number_field(line, "output_length", source, number, int, minimum=1)
            hash_ids = line.get("hash_ids", [])
            if not isinstance(hash_ids, list) or not all(isinstance(h, (int, str)) for h in hash_ids):
                raise TraceFormatError(source, number, "hash_ids", f"got {hash_ids!r}; valid: a list of block ids")
            blocks = tuple(str(h) for h in hash_ids[: input_tokens // block_tokens])
            check_chain(blocks, "hash_ids", source, number, parents)
            tool_s = 0.0
            if index + 1 < len(requests):
                tool_s, from_timestamps = _gap(line, requests[index + 1], source, number)
                used_timestamps |= from_timestamps
            turns.append(TraceTurn(input_tokens, output_tokens, tool_s, blocks))
        jobs.append(TraceJob(job_id, arrival, tuple(turns)))
    if not jobs:
        raise TraceFormatError(source, 1, "json", "no requests in the file")
    jobs.sort(key=lambda job: job.arrival_s)  # stable: file order among equal arrivals
    notes = {"format": "mooncake", "block_tokens": block_tokens}
    if used_timestamps:
        notes["tool_s"] = "gap between the turns' timestamps (includes the original answer's service time)"
    return jobs, notes


def _gap(line: dict, following: tuple[int, dict], source: str, number: int) -> tuple[float, bool]:
    next_number, next_line = following
    if "delay" in next_line:
        return number_field(next_line, "delay", source, next_number, float) / 1000, False
    start = number_field(line, "timestamp", source, number, float)
    end = number_field(next_line, "timestamp", source, next_number, float, minimum=start)
    return (end - start) / 1000, True


def read_swe_agent(paths: Iterable[Path], block_tokens: int = 64, count: Callable[[str], int] | None = None,
                   jps: float = 0.5, seed: int = 7) -> tuple[list[TraceJob], dict]:  # fmt: skip
    """One job per trajectory file (in name order), arriving as a Poisson process at ``jps``."""
    tokens = count or (lambda text: max(1, round(len(text) / CHARS_PER_TOKEN)))
    rng = random.Random(f"swe-agent:{seed}")
    parents: dict = {}
    jobs, arrival = [], 0.0
    for path in sorted(paths):
        jobs.append(_trajectory_job(path, block_tokens, tokens, parents, arrival))
        arrival += rng.expovariate(jps)
    if not jobs:
        raise TraceFormatError("swe-agent", 0, "files", "no trajectory files given")
    notes = {"format": "swe-agent", "block_tokens": block_tokens, "arrivals": f"Poisson at {jps:g} jobs/s, seed {seed}",
             "tokens": "the given tokenizer" if count else f"{CHARS_PER_TOKEN} characters per token"}  # fmt: skip
    return jobs, notes


def _trajectory_job(path: Path, block_tokens: int, tokens, parents: dict, arrival: float) -> TraceJob:
    source = str(path)
    text = "\n".join(_lines(path))
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise TraceFormatError(source, error.lineno, "json", f"{error.msg} at column {error.colno}") from None
    if not isinstance(document, dict):
        raise TraceFormatError(source, 1, "json", f"a trajectory is one JSON object, got {type(document).__name__}")
    steps = _array_items(text, "trajectory", source)
    history = document.get("history", [])
    if not isinstance(history, list):
        raise TraceFormatError(source, _line_of(text, '"history"'), "history", "valid: a list of messages")
    system = "".join(m.get("content", "") for m in history if isinstance(m, dict) and m.get("role") == "system"
                     and isinstance(m.get("content"), str))  # fmt: skip
    instance = next((m["content"] for m in history if isinstance(m, dict) and m.get("role") == "user"
                     and isinstance(m.get("content"), str)), "")  # fmt: skip
    shared = tokens(system) // block_tokens if system else 0
    system_id = hashlib.md5(system.encode()).hexdigest()[:10]
    job_id = path.name.removesuffix(".json").removesuffix(".traj")
    context = tokens(system) + tokens(instance) if system or instance else 0
    turns = []
    for index, (line, step) in enumerate(steps):
        where = f"trajectory[{index}]"
        if not isinstance(step, dict):
            raise TraceFormatError(source, line, where, "valid: an object with response, observation, execution_time")
        response, observation = step.get("response"), step.get("observation")
        for name, value in (("response", response), ("observation", observation)):
            if not isinstance(value, str):
                raise TraceFormatError(source, line, f"{where}.{name}", f"got {value!r}; valid: a string")
        tool_s = number_field(step, "execution_time", source, line, float) if "execution_time" in step else None
        if tool_s is None:
            raise TraceFormatError(source, line, f"{where}.execution_time", "missing; valid: seconds >= 0")
        full = max(1, context) // block_tokens
        blocks = tuple(f"sys-{system_id}-{i}" if i < shared else f"{job_id}-{i}" for i in range(full))
        check_chain(blocks, f"{where} (prompt blocks)", source, line, parents)
        last = index == len(steps) - 1
        turns.append(TraceTurn(max(1, context), tokens(response), 0.0 if last else tool_s, blocks))
        context += tokens(response) + tokens(observation)
    if not turns:
        raise TraceFormatError(source, _line_of(text, '"trajectory"'), "trajectory", "no steps")
    return TraceJob(job_id, round(arrival, 3), tuple(turns))


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as error:
        raise TraceFormatError(str(path), 0, "file", error.strerror or str(error)) from None


def _line_of(text: str, needle: str) -> int:
    offset = text.find(needle)
    return text.count("\n", 0, offset) + 1 if offset >= 0 else 1


def _array_items(text: str, key: str, source: str) -> list[tuple[int, object]]:
    """The items of the document's top-level ``key`` array, each with the line it starts on (json.loads keeps
    no positions, so the array is decoded item by item)."""
    decoder = json.JSONDecoder()
    start = text.find(f'"{key}"')
    if start < 0:
        raise TraceFormatError(source, 1, key, "missing; valid: a list of steps")
    position = text.index(":", start) + 1
    while text[position].isspace():
        position += 1
    if text[position] != "[":
        raise TraceFormatError(source, _line_of(text, f'"{key}"'), key, "valid: a list of steps")
    position += 1
    items = []
    while True:
        while text[position] in " \t\r\n,":
            position += 1
        if text[position] == "]":
            return items
        line = text.count("\n", 0, position) + 1
        try:
            item, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise TraceFormatError(source, error.lineno, "json", f"{error.msg} at column {error.colno}") from None
        items.append((line, item))
