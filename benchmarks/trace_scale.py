"""How long does a Mooncake-scale trace take, from the published format to simulated records?

Mooncake's FAST'25 conversation trace has 12,031 requests of about 12k prompt tokens (512-token ``hash_ids``, no
session ids) and answers of about 340 tokens. This machine cannot download it, so the benchmark writes a file of
the same format and shape, seeded: sessions of a few turns, each turn's blocks extending the previous turn's, a
system prefix shared by every session, arrivals over an hour. Then, each stage timed:

1. ``convert``: the converter reads it and recovers the sessions from the block chains (``--format mooncake``);
2. ``schedule``: the cell's schedule of the replay (loading and checking the converted trace included);
3. ``simulate``: the replay on one simulated GPU at the trace's own rate, every request to its end.

    python benchmarks/trace_scale.py [--requests 12031] [--gpu H200] [--policy fcfs] [--seed 7] [--keep DIR]

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.sim.calibrate import MODEL
from orchestrator.sim.config import sim_engine
from orchestrator.sim.hardware import Device
from orchestrator.sim.loop import simulate
from orchestrator.workload.schedule import Schedule, schedule_for
from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.traces import convert
from orchestrator.workload.traces.schema import TraceRef, load_trace

BLOCK_TOKENS = 512
HOUR_MS = 3_600_000
SYSTEM_BLOCKS = 2  # the prefix every session sends first
FIRST_PROMPT_BLOCKS = (6, 24)  # a session's first prompt, in blocks (uniform)
ADDED_BLOCKS = (1, 6)  # what each later turn appends: the answer and the user's next message
MEAN_TURNS = 3.0  # a session's turns: geometric
OUTPUT_TOKENS = (40, 640)  # uniform: a mean of 340


def write_mooncake_shaped(path: Path, num_requests: int, seed: int) -> None:
    """``num_requests`` lines of Mooncake's format, in timestamp order: sessions of chained prompts, no session ids."""
    rng = random.Random(seed)
    requests: list[tuple[int, list[int], int, int]] = []  # (timestamp ms, hash_ids, input tokens, output tokens)
    next_id = SYSTEM_BLOCKS
    while len(requests) < num_requests:
        at = rng.randrange(HOUR_MS)
        blocks = list(range(SYSTEM_BLOCKS))
        num_new = rng.randint(*FIRST_PROMPT_BLOCKS)
        while len(requests) < num_requests:
            blocks += range(next_id, next_id + num_new)
            next_id += num_new
            tail = rng.randrange(BLOCK_TOKENS)  # the prompt's partial last block, not in its hash_ids
            requests.append((at, list(blocks), len(blocks) * BLOCK_TOKENS + tail, rng.randint(*OUTPUT_TOKENS)))
            if rng.random() < 1 / MEAN_TURNS:
                break
            at += rng.randint(5_000, 60_000)
            num_new = rng.randint(*ADDED_BLOCKS)
    requests.sort(key=lambda request: request[0])
    with open(path, "w") as handle:
        for at, hash_ids, input_tokens, output_tokens in requests:
            line = {"timestamp": at, "input_length": input_tokens, "output_length": output_tokens, "hash_ids": hash_ids}
            handle.write(json.dumps(line) + "\n")


def _timed(what, *args):
    started = time.perf_counter()
    result = what(*args)
    return result, time.perf_counter() - started


def _replay(converted: Path) -> tuple[WorkloadSpec, Schedule]:
    """The converted trace read and checked, replayed whole at its own rate, and the schedule of that cell."""
    reference = TraceRef.of(converted)
    trace = load_trace(reference)
    span_s = trace.jobs[-1].arrival_s - trace.jobs[0].arrival_s
    workload = WorkloadSpec(trace=reference, jps=trace.native_jps, duration_s=span_s + 1, request_timeout_s=3600,
                            job_timeout_s=4 * 3600)  # fmt: skip
    return workload, schedule_for(workload)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=12_031)
    parser.add_argument("--gpu", default="H200")
    parser.add_argument("--policy", default="fcfs")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="write the two trace files here instead of a temporary directory")
    args = parser.parse_args(argv)
    if args.requests < 1:
        parser.error(f"--requests {args.requests}: valid: 1 or more")
    directory = args.keep or Path(tempfile.mkdtemp(prefix="kvsweep-trace-scale-"))
    directory.mkdir(parents=True, exist_ok=True)
    source, converted = directory / "mooncake-shaped.jsonl", directory / "mooncake-shaped.kvsweep.jsonl"
    write_mooncake_shaped(source, args.requests, args.seed)

    code, convert_s = _timed(convert.main, ["--format", "mooncake", str(source), "--out", str(converted)])
    if code:
        return code
    (workload, schedule), schedule_s = _timed(_replay, converted)
    engine = sim_engine(Device.gpu(args.gpu), MODEL, args.policy, 0.0, workload)
    result, simulate_s = _timed(simulate, workload, engine, schedule)

    num_requests = sum(len(job.turns) for job in schedule.jobs)
    prompt_tokens = sum(turn.prompt_tokens for job in schedule.jobs for turn in job.turns)
    ok = [record for record in result.requests if record.status.is_ok]
    cached = sum(record.cached_tokens or 0 for record in ok)
    print(f"{num_requests:,} requests in {len(schedule.jobs):,} recovered sessions, "
          f"{prompt_tokens / num_requests:,.0f} prompt tokens on average; {args.gpu} {args.policy} at the trace's rate")
    print(f"convert {convert_s:.1f} s, schedule {schedule_s:.1f} s, simulate {simulate_s:.1f} s "
          f"({result.stats.steps:,} engine steps); {len(ok):,} requests completed, "
          f"{cached / max(1, sum(record.prompt_tokens or 0 for record in ok)):.1%} of their prompt tokens cached")
    print(json.dumps({
        "requests": num_requests, "sessions": len(schedule.jobs), "mean_prompt_tokens": round(prompt_tokens / num_requests),
        "gpu": args.gpu, "policy": args.policy, "convert_s": round(convert_s, 2), "schedule_s": round(schedule_s, 2),
        "simulate_s": round(simulate_s, 2), "total_s": round(convert_s + schedule_s + simulate_s, 2),
        "steps": result.stats.steps, "completed": len(ok), "evicted_blocks": result.stats.evicted_blocks,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
