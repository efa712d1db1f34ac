"""Coding-agent sessions in kv-cache-tester's format into the project's trace format (``schema``).

``callanjfox/kv-cache-tester`` publishes real Claude Code conversations as ``traces/trace_NNNN.json``, one JSON
object per conversation (SemiAnalysis' agentic benchmark replays traces of this shape through AIPerf)::

    {"id": "trace_0720", "block_size": 64, "hash_id_scope": "local", "tool_tokens": 12784, "system_tokens": 3397,
     "requests": [{"t": 0.0, "in": 42487, "out": 509, "hash_ids": [1, 2, ...], "api_time": 10.8,
                   "think_time": 0.0, "stop": "tool_use", ...},
                  {"t": 3742.8, "type": "subagent", "agent_id": "agent_005", "requests": [...]}, ...]}

How it is read (the converted file's header says the same):

- **Jobs.** A conversation is a job; its requests, in file order, are its turns (``in`` is the whole prompt, ``out``
  the answer, at least one token). A sub-agent entry (``"type": "subagent"``) is a job of its own that starts at its
  recorded offset ``t`` after its conversation's start, its requests' ``t`` counting from its own start; the parent
  does not wait for it (its next turn keeps its recorded idle time, which covered the sub-agent's run).
- **Tool time**, between a turn's answer and the next request: the next request's ``think_time`` (the client's idle
  time before it). Where that is missing, the gap between the two ``t`` less the turn's ``api_time`` (the original
  request's duration); where that is missing too, the plain gap, which also holds the original service time (an
  upper bound, counted in the header). ``api_time`` is used for nothing else: a replay measures its own.
- **Blocks.** ``hash_ids`` name the prompt's full ``block_size``-token blocks (ids past ``in // block_size`` are
  dropped). Ids are numbered per block content, not chained, so they are re-chained as vLLM's prefix cache chains
  blocks: a block is shared only where two prompts agree on every block from the start. Ids are scoped to their
  conversation (``"local"``, or no scope) and within it to the parent or one sub-agent; ``"global"`` ids are one
  numbering across every file. The leading ``shared_prefix_share`` (default 0.5, the share kv-cache-tester's own
  replayer warms) of ``tool_tokens + system_tokens``, in whole blocks, is declared shared by every conversation and
  sub-agent: the tool definitions and system prompt that Claude Code sends first.
- **Arrivals.** The files carry no common clock: conversations arrive as a Poisson process at ``jps`` (seeded), in
  the order given (file names, or a seeded sample of them).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator.workload.traces.schema import (
    TraceFormatError,
    TraceJob,
    TraceTurn,
    check_chain,
    nested_number_field,
    number_field,
)
from orchestrator.workload.traces.source_files import array_items, json_document

DEFAULT_SHARED_PREFIX_SHARE = 0.5
SHARED_PREFIX = "tools+system"


@dataclass
class _Reading:
    """What reading the files found, for the header; and the block numbering shared across files."""

    block_tokens: int
    shared_prefix_share: float
    chained: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (scope, previous id, raw id) -> id
    parents: dict = field(default_factory=dict)  # for check_chain, across every file
    gaps_with_service_time: int = 0
    answers_raised_to_one: int = 0


def read_kv_cache_tester(paths: Sequence[Path], jps: float = 0.5, seed: int = 7,
                         shared_prefix_share: float = DEFAULT_SHARED_PREFIX_SHARE,
                         ) -> tuple[list[TraceJob], dict]:  # fmt: skip
    """The jobs of the conversation files ``paths`` (in that order), and what the header should say about them."""
    if not paths:
        raise TraceFormatError("kv-cache-tester", 0, "files", "no conversation files given")
    rng = random.Random(f"kv-cache-tester:{seed}")
    reading: _Reading | None = None
    jobs: list[TraceJob] = []
    arrival = 0.0
    for path in paths:
        document, text = json_document(path, "a conversation")
        block_tokens = number_field(document, "block_size", str(path), 1, int, minimum=1, default=64)
        if reading is None:
            reading = _Reading(block_tokens, shared_prefix_share)
        elif block_tokens != reading.block_tokens:
            valid = f"{reading.block_tokens}, as the files before it"
            raise TraceFormatError(str(path), 1, "block_size", f"got {block_tokens}; valid: {valid}")
        jobs += _conversation_jobs(path, document, text, round(arrival, 3), reading)
        arrival += rng.expovariate(jps)
    jobs.sort(key=lambda job: job.arrival_s)  # stable: a conversation before the sub-agents it starts at once
    return jobs, _notes(reading, len(paths), jps, seed)


def _conversation_jobs(path: Path, document: dict, text: str, arrival: float, reading: _Reading) -> list[TraceJob]:
    """The conversation's job and its sub-agents' jobs."""
    source = str(path)
    conversation = document.get("id", path.stem)
    if not isinstance(conversation, str) or not conversation:
        raise TraceFormatError(source, 1, "id", f"got {conversation!r}; valid: a non-empty string")
    scope = document.get("hash_id_scope")
    shared_tokens = sum(number_field(document, name, source, 1, int, default=0)
                        for name in ("tool_tokens", "system_tokens"))  # fmt: skip
    context = _Context(source, conversation, "global" if scope == "global" else conversation,
                       int(reading.shared_prefix_share * shared_tokens) // reading.block_tokens)  # fmt: skip
    requests, subagents = context.split(array_items(text, "requests", source, "requests"), "requests")
    jobs = [TraceJob(conversation, arrival, context.turns(requests, "requests", reading))]
    return jobs + [_subagent_job(context, line, where, entry, arrival, reading) for line, where, entry in subagents]


def _subagent_job(parent: _Context, line: int, where: str, entry: dict, arrival: float, reading: _Reading) -> TraceJob:
    agent = entry.get("agent_id")
    if not isinstance(agent, str) or not agent:
        raise TraceFormatError(parent.source, line, f"{where}.agent_id", f"got {agent!r}; valid: a non-empty string")
    offset = nested_number_field(entry, "t", where, parent.source, line, float, 0)
    job_id = f"{parent.job_id}/{agent}"
    scope = parent.scope if parent.scope == "global" else job_id
    context = _Context(parent.source, job_id, scope, parent.shared_blocks)
    items = entry.get("requests")
    if not isinstance(items, list):
        raise TraceFormatError(parent.source, line, f"{where}.requests", "valid: a list of requests")
    requests, nested = context.split([(line, item) for item in items], f"{where}.requests")
    if nested:
        raise TraceFormatError(parent.source, line, f"{nested[0][1]}.type", "a sub-agent within a sub-agent")
    return TraceJob(job_id, round(arrival + offset, 3), context.turns(requests, f"{where}.requests", reading))


@dataclass(frozen=True)
class _Context:
    """A conversation or one of its sub-agents: whose requests these are and how their block ids are read."""

    source: str
    job_id: str
    scope: str  # where raw ids are one numbering: the conversation, the sub-agent, or "global"
    shared_blocks: int  # leading blocks of every prompt declared shared (tools and system prompt)

    def split(self, items: list[tuple[int, object]], where: str) -> tuple[list[tuple], list[tuple]]:
        """``items`` (each with its line) as its requests and its sub-agent entries, each ``(line, where, item)``."""
        requests, subagents = [], []
        for index, (line, item) in enumerate(items):
            here = f"{where}[{index}]"
            if not isinstance(item, dict):
                raise TraceFormatError(self.source, line, here, f"got {item!r}; valid: an object")
            (subagents if item.get("type") == "subagent" else requests).append((line, here, item))
        return requests, subagents

    def turns(self, requests: list[tuple], where: str, reading: _Reading) -> tuple[TraceTurn, ...]:
        """The turns of ``requests`` (from ``split``), with their tool times."""
        if not requests:
            raise TraceFormatError(self.source, 1, where, "no requests")
        turns = [self._turn(line, here, request, reading) for line, here, request in requests]
        tool_times = [self._tool_s(previous, following, reading) for previous, following in zip(requests, requests[1:])]
        return tuple(replace(turn, tool_s=tool_s) for turn, tool_s in zip(turns, [*tool_times, 0.0]))

    def _turn(self, line: int, where: str, request: dict, reading: _Reading) -> TraceTurn:
        input_tokens = nested_number_field(request, "in", where, self.source, line, int, 1)
        output_tokens = nested_number_field(request, "out", where, self.source, line, int, 0)
        if output_tokens == 0:
            reading.answers_raised_to_one += 1
        raw = request.get("hash_ids", [])
        if not isinstance(raw, list) or not all(isinstance(h, (int, str)) and not isinstance(h, bool) for h in raw):
            raise TraceFormatError(self.source, line, f"{where}.hash_ids", f"got {raw!r}; valid: a list of block ids")
        blocks = self._blocks(raw[: input_tokens // reading.block_tokens], reading)
        check_chain(blocks, f"{where}.hash_ids", self.source, line, reading.parents)
        return TraceTurn(input_tokens, max(1, output_tokens), 0.0, blocks)

    def _blocks(self, raw: list, reading: _Reading) -> tuple[str, ...]:
        """The prompt's blocks as chained ids: the declared shared prefix, then one id per distinct (previous block,
        raw id) within the scope, numbered in order of first appearance."""
        blocks: list[str] = []
        for position, raw_id in enumerate(raw):
            if position < self.shared_blocks:
                blocks.append(f"{SHARED_PREFIX}:{position}")
            else:
                path = (self.scope, blocks[-1] if blocks else "", str(raw_id))
                blocks.append(reading.chained.setdefault(path, f"{self.scope}:{len(reading.chained)}"))
        return tuple(blocks)

    def _tool_s(self, previous: tuple, following: tuple, reading: _Reading) -> float:
        (line, where, before), (next_line, next_where, after) = previous, following
        if "think_time" in after:
            return nested_number_field(after, "think_time", next_where, self.source, next_line, float, 0)
        start = nested_number_field(before, "t", where, self.source, line, float, 0)
        gap = nested_number_field(after, "t", next_where, self.source, next_line, float, start) - start
        if "api_time" in before:
            return max(0.0, gap - nested_number_field(before, "api_time", where, self.source, line, float, 0))
        reading.gaps_with_service_time += 1
        return gap


def _notes(reading: _Reading, num_files: int, jps: float, seed: int) -> dict:
    notes: dict = {
        "format": "kv-cache-tester", "block_tokens": reading.block_tokens, "files": num_files,
        "arrivals": f"conversations as a Poisson process at {jps:g} jobs/s, seed {seed}; sub-agents at their offsets",
        "tool_s": "think_time; else the gap in t less api_time; else the gap in t (holds the original service time: "
                  f"{reading.gaps_with_service_time} gaps)",
        "shared_prefix": f"{reading.shared_prefix_share:g} of tool_tokens + system_tokens, in whole blocks, "
                         "shared by every conversation and sub-agent",
    }  # fmt: skip
    if reading.answers_raised_to_one:
        notes["out"] = f"{reading.answers_raised_to_one} answers of 0 tokens sent as 1 token"
    return notes
