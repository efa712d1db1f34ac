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
import math
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
TICK_MS = 3_000  # the published trace stamps arrivals in 3-second ticks
SPAN_MS = 3_537_000  # its first to last arrival
RATE_PER_S = (2.8, 3.6)  # its arrival rate rises over the hour (sampled at the start, middle and end)
MULTI_TURN_SHARE = 0.29  # of its recovered sessions, those of two turns or more ...
EXTRA_TURNS_MEAN = 1.34  # ... which hold 7,172 requests: 3.34 turns each on average
TURN_GAP_S = (100.0, 1.0)  # median and log-sigma of the time between a session's turns (lognormal)
MAX_PROMPT_TOKENS = 126_527
MULTI_TURN_FIRST_PROMPT_SCALE = 0.75
# Quantiles of the published trace (1,292 sampled lines): (quantile, tokens), read piecewise log-linearly.
PROMPT_QUANTILES = ((0.0, 891), (0.10, 966), (0.25, 2_067), (0.50, 6_718), (0.75, 14_750), (0.90, 26_442),
                    (0.99, 87_182), (1.0, 124_847))  # fmt: skip
OUTPUT_QUANTILES = ((0.0, 1), (0.023, 3), (0.065, 16), (0.10, 28), (0.25, 184), (0.50, 359), (0.75, 481),
                    (0.90, 595), (0.99, 932), (1.0, 2_000))  # fmt: skip
ADDED_BLOCKS_QUANTILES = ((0.0, 1), (0.10, 1), (0.50, 2), (0.90, 12), (1.0, 40))  # a later turn appends these


def _quantile_draw(rng: random.Random, quantiles: tuple[tuple[float, int], ...]) -> int:
    """One draw from the distribution the quantiles describe, log-linear between them."""
    u = rng.random()
    for (q0, v0), (q1, v1) in zip(quantiles, quantiles[1:]):
        if u <= q1:
            share = (u - q0) / (q1 - q0) if q1 > q0 else 1.0
            return round(math.exp(math.log(v0) + share * (math.log(v1) - math.log(v0))))
    return quantiles[-1][1]


def _session_start_ms(rng: random.Random) -> int:
    """A session's first arrival: the trace's rate rising linearly over the hour (inverse of its cumulative)."""
    low, high = RATE_PER_S
    u = rng.random()
    share = (math.sqrt(low**2 + u * (high**2 - low**2)) - low) / (high - low)  # where the rate's area reaches u
    return int(share * SPAN_MS)


def write_mooncake_shaped(path: Path, num_requests: int, seed: int) -> None:
    """``num_requests`` lines of Mooncake's format in timestamp order, shaped as the published conversation trace:
    its prompt and answer lengths, its 3-second ticks and rising rate over the hour, one block (id 0) every prompt
    starts with, and sessions (no ids; the converter recovers them) whose next prompt re-sends all but the last,
    partial block of the previous one and appends a few."""
    rng = random.Random(seed)
    requests: list[tuple[int, list[int], int, int]] = []  # (timestamp ms, hash_ids, input tokens, output tokens)
    next_id = 1
    while len(requests) < num_requests:
        at = _session_start_ms(rng)
        turns = 1 if rng.random() > MULTI_TURN_SHARE else 2 + _geometric(rng, EXTRA_TURNS_MEAN)
        # A session's later prompts grow from its first: drawn smaller, the trace's lengths come out as published.
        scale = 1.0 if turns == 1 else MULTI_TURN_FIRST_PROMPT_SCALE
        prompt_tokens = min(MAX_PROMPT_TOKENS, max(1, round(scale * _quantile_draw(rng, PROMPT_QUANTILES))))
        blocks = [0]
        for _ in range(turns):
            num_blocks = -(-prompt_tokens // BLOCK_TOKENS)
            num_new = num_blocks - len(blocks)
            blocks += range(next_id, next_id + num_new)
            next_id += num_new
            requests.append((at // TICK_MS * TICK_MS, list(blocks), prompt_tokens, _quantile_draw(rng, OUTPUT_QUANTILES)))
            at += int(rng.lognormvariate(math.log(TURN_GAP_S[0]), TURN_GAP_S[1]) * 1000)
            full = prompt_tokens // BLOCK_TOKENS  # the next prompt re-sends the full blocks, then appends
            if at > SPAN_MS or len(requests) == num_requests or full + 1 >= MAX_PROMPT_TOKENS // BLOCK_TOKENS:
                break
            blocks = blocks[:max(1, full)]
            added = _quantile_draw(rng, ADDED_BLOCKS_QUANTILES) * BLOCK_TOKENS - rng.randrange(BLOCK_TOKENS)
            prompt_tokens = min(MAX_PROMPT_TOKENS, len(blocks) * BLOCK_TOKENS + max(1, added))
    requests.sort(key=lambda request: request[0])
    with open(path, "w") as handle:
        for at, hash_ids, input_tokens, output_tokens in requests:
            line = {"timestamp": at, "input_length": input_tokens, "output_length": output_tokens, "hash_ids": hash_ids}
            handle.write(json.dumps(line) + "\n")


def _geometric(rng: random.Random, mean: float) -> int:
    """0, 1, 2, ... with the given mean."""
    return int(math.log(1 - rng.random()) / math.log(mean / (1 + mean)))


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
