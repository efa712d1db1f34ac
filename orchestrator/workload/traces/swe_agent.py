"""SWE-agent trajectories into the project's trace format (``schema``). Users download the trajectories themselves.

SWE-agent trajectory files (``<instance>.traj``, one JSON document each; mini-swe-agent's ``.traj.json`` has the
same ``trajectory`` steps): one file is one job; each step one turn: its prompt is the system and instance
messages plus every earlier step's response and observation, its answer the step's response, its tool time the
step's ``execution_time``. Token counts come from ``--tokenizer`` (a Hugging Face tokenizer directory) or, without
one, from 4 characters per token, said so in the header. The system message's full blocks are shared by every job
that has the same one. The files carry no arrival times: jobs arrive as a Poisson process at ``--jps`` (seeded),
in file-name order.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable
from pathlib import Path

from orchestrator.workload.traces.schema import TraceFormatError, TraceJob, TraceTurn, check_chain, number_field
from orchestrator.workload.traces.source_files import array_items, json_document, line_of

CHARS_PER_TOKEN = 4


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
    document, text = json_document(path, "a trajectory")
    steps = array_items(text, "trajectory", source, "steps")
    history = document.get("history", [])
    if not isinstance(history, list):
        raise TraceFormatError(source, line_of(text, '"history"'), "history", "valid: a list of messages")
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
        raise TraceFormatError(source, line_of(text, '"trajectory"'), "trajectory", "no steps")
    return TraceJob(job_id, round(arrival, 3), tuple(turns))
