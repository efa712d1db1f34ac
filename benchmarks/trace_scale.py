"""How long does an hour of Mooncake-scale traffic take, from the published format to the report, on one replica and
on eight?

Mooncake's FAST'25 conversation trace has 12,031 requests over an hour: prompts of 12,041 tokens on average (median
6,718, up to 126,527) in 512-token ``hash_ids``, answers of 348, no session ids, arrivals in 3-second ticks at a
rate that rises from about 2.8 to 3.6 requests a second. This machine cannot download it, so the benchmark writes
a file of the same format, size and statistics (its quantiles, measured on 1,292 lines sampled at its start, middle
and end), seeded: sessions whose next prompt re-sends all but the last, partial block of the previous one and
appends a few, one block every prompt starts with. Then, each stage timed:

1. ``convert``: the converter reads it and recovers the sessions from the block chains (``--format mooncake``);
2. ``schedule``: the cell's schedule of the replay (loading and checking the converted trace included);
3. ``simulate``: the replay on one simulated GPU, and on eight behind round-robin, at the trace's own rate;
4. ``records``: the eight replicas' scheduler trace written as the cell stores it (parquet, zstd) against the JSON
   lines it replaced;
5. with ``--sweep``: the whole nine-cell study as a user runs it (fcfs, continuum and lmcache, each behind
   round-robin, session-affinity and prefix-aware, eight replicas), start to report, then its report built again
   alone, with the report's peak memory.

    python benchmarks/trace_scale.py [--requests 12031] [--gpu H100] [--policy fcfs] [--seed 7] [--keep DIR] [--sweep]

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean

from orchestrator.paths import PROJECT_ROOT
from orchestrator.records.scheduler_trace_file import parquet_of_entries
from orchestrator.roofline.hardware import Device
from orchestrator.routing.rules import RouterKind
from orchestrator.sim.calibrate import MODEL
from orchestrator.sim.config import sim_engine
from orchestrator.sim.loop import Replicas, simulate
from orchestrator.workload.schedule import Schedule, schedule_for
from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.traces import convert
from orchestrator.workload.traces.schema import TraceRef, load_trace

SWEEP_POLICIES = ("fcfs", "continuum", "lmcache")
SWEEP_ROUTERS = ("round-robin", "session-affinity", "prefix-aware")
SWEEP_REPLICAS = 8
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


def _simulated(workload: WorkloadSpec, schedule: Schedule, gpu: str, policy: str, replicas: Replicas):
    engine = sim_engine(Device.gpu(gpu), MODEL, policy, 0.0, workload)
    return _timed(simulate, workload, engine, schedule, replicas)


def _records(result) -> dict:
    """The eight replicas' trace as a cell stores it, against the JSON lines it replaced: bytes and seconds."""
    table, table_s = _timed(parquet_of_entries, result.replica_scheduler_traces)
    lines, lines_s = _timed(result.scheduler_trace_bytes)
    return {"trace_parquet_bytes": len(table), "trace_parquet_s": round(table_s, 2),
            "trace_jsonl_bytes": len(lines), "trace_jsonl_s": round(lines_s, 2)}  # fmt: skip


def _sweep(converted: Path, directory: Path, gpu: str) -> dict:
    """The nine-cell study as a user runs it, start to report, then the report alone with its peak memory."""
    results = directory / "results"
    shutil.rmtree(results, ignore_errors=True)
    command = [sys.executable, str(PROJECT_ROOT / "sweeps" / "agent_trace.py"), "--engine", "sim", "--trace",
               str(converted), "--gpus", gpu, "--policies", ",".join(SWEEP_POLICIES), "--load", "1", "--replicas",
               str(SWEEP_REPLICAS), "--routers", ",".join(SWEEP_ROUTERS), "--max-model-len", "131072",
               "--results-dir", str(results)]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sweep_s = time.perf_counter() - started
    # The report's own peak (VmHWM): ru_maxrss would carry this process's peak over into the child.
    measure = ("import re, sys; from orchestrator.analysis.report import main; code = main(sys.argv[1:]); "
               "print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)); sys.exit(code)")  # fmt: skip
    started = time.perf_counter()
    report = subprocess.run([sys.executable, "-c", measure, str(results / "agent_trace"), "--out",
                             str(directory / "report")], check=True, capture_output=True, text=True)  # fmt: skip
    report_s = time.perf_counter() - started
    trace_bytes = sum(path.stat().st_size for path in (results / "agent_trace" / "cells").glob("*/scheduler_trace.*"))
    return {"sweep_cells": len(SWEEP_POLICIES) * len(SWEEP_ROUTERS), "sweep_s": round(sweep_s, 1),
            "report_s": round(report_s, 1), "report_peak_mib": round(int(report.stdout.split()[-1]) / 1024),
            "sweep_trace_bytes": trace_bytes}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=12_031)
    parser.add_argument("--gpu", default="H100")
    parser.add_argument("--policy", default="fcfs")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="write the trace files (and the sweep's results) here instead of a "
                        "temporary directory")  # fmt: skip
    parser.add_argument("--sweep", action="store_true", help="also run the nine-cell study end to end, and its report")
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
    one, one_s = _simulated(workload, schedule, args.gpu, args.policy, Replicas())
    eight, eight_s = _simulated(workload, schedule, args.gpu, args.policy,
                                Replicas(SWEEP_REPLICAS, RouterKind.ROUND_ROBIN))  # fmt: skip
    simulate_peak_mib = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    records = _records(eight)
    figures = {
        "requests": sum(len(job.turns) for job in schedule.jobs), "sessions": len(schedule.jobs),
        "mean_prompt_tokens": round(mean(turn.prompt_tokens for job in schedule.jobs for turn in job.turns)),
        "gpu": args.gpu, "policy": args.policy, "convert_s": round(convert_s, 2), "schedule_s": round(schedule_s, 2),
        "simulate_1_s": round(one_s, 2), "steps_1": one.stats.steps, "completed_1": _completed(one),
        "simulate_8_s": round(eight_s, 2), "steps_8": eight.stats.steps, "completed_8": _completed(eight),
        "simulate_peak_mib": simulate_peak_mib, **records,
    }  # fmt: skip
    print(f"{figures['requests']:,} requests in {figures['sessions']:,} recovered sessions, "
          f"{figures['mean_prompt_tokens']:,} prompt tokens on average; {args.gpu} {args.policy} at the trace's rate")
    print(f"convert {convert_s:.1f} s, schedule {schedule_s:.1f} s")
    for count, result, seconds in ((1, one, one_s), (SWEEP_REPLICAS, eight, eight_s)):
        print(f"simulate on {count} replica(s): {seconds:.1f} s, {result.stats.steps:,} engine steps, "
              f"{_completed(result):,} requests completed")  # fmt: skip
    print(f"records of {SWEEP_REPLICAS} replicas: trace {records['trace_parquet_bytes'] / 1e6:,.1f} MB as parquet in "
          f"{records['trace_parquet_s']:.1f} s, against {records['trace_jsonl_bytes'] / 1e6:,.1f} MB of JSON lines "
          f"({records['trace_parquet_bytes'] / records['trace_jsonl_bytes']:.1%}); peak memory so far "
          f"{simulate_peak_mib:,} MiB")  # fmt: skip
    if args.sweep:
        figures |= _sweep(converted, directory, args.gpu)
        print(f"the {figures['sweep_cells']}-cell study on {SWEEP_REPLICAS} replicas, start to report: "
              f"{figures['sweep_s']:.0f} s; its report alone {figures['report_s']:.1f} s, peak "
              f"{figures['report_peak_mib']:,} MiB")  # fmt: skip
    print(json.dumps(figures))
    return 0


def _completed(result) -> int:
    return sum(1 for record in result.requests if record.status.is_ok)


if __name__ == "__main__":
    sys.exit(main())
