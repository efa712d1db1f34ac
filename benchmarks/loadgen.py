"""Is the load generator ever the bottleneck? Lag measured where it matters: at the server.

Drives the agent workload at full prompt size against the fake engine (a separate process that answers
at once and records each request's arrival) and reports, per load point, from the server-side arrival
times: achieved against target request rate, dispatch lag (arrival minus scheduled time) p50/p99/max,
and the client's CPU time per request. The client is sharded over ``--processes`` processes sharing one
start epoch. The last line is one JSON object: {"points": [...], ...}, the source-study point first.

Beside it, each point replays the same request times and sizes with vLLM's own ``vllm bench serve``
client (its ``timed_trace`` dataset, from the CPU build) against a fresh fake engine. That client's
start time is not visible from outside, so both clients' lags are also given offset-free: the k-th
arrival against the k-th scheduled time, shifted so the least-lagged request has lag 0.

    python benchmarks/loadgen.py [--jps 15 150] [--duration-s 45 10] [--processes 1] [--scale 1.0] [--no-vllm-bench]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

from orchestrator.models.tiny import ensure_tiny_model
from orchestrator.records.cell import RequestOptions
from orchestrator.replica.config import FakeEngineConfig
from orchestrator.replica.fake_engine import fake_server_command
from orchestrator.replica.server import ServerProcess, StartLimits, free_port
from orchestrator.workload.actor import merge_shards
from orchestrator.workload.loadgen import LoadGenerator
from orchestrator.workload.plan import WorkloadPlan, build_plan
from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.tokenizer import token_counter_for

OPTIONS = RequestOptions(model="tiny")
START_LEAD_S = 2.0


def run_shard(args: tuple[WorkloadPlan, str, float]):
    plan, url, epoch = args
    started = _cpu_s()
    result = LoadGenerator(url, OPTIONS).run(plan, epoch)
    return result, _cpu_s() - started


def _cpu_s() -> float:
    """User and system CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def offset_free_lags_ms(scheduled: list[float], arrivals: list[float]) -> np.ndarray:
    """Lag of the k-th arrival behind the k-th scheduled time, with the smallest lag taken as zero."""
    lags = np.sort(np.array(arrivals)) - np.sort(np.array(scheduled))
    return (lags - lags.min()) * 1000


def lag_figures(lags_ms: np.ndarray) -> dict:
    return {
        "p50_lag_ms": round(float(np.percentile(lags_ms, 50)), 3),
        "p99_lag_ms": round(float(np.percentile(lags_ms, 99)), 3),
        "max_lag_ms": round(float(lags_ms.max()), 3),
    }


def start_fake_engine(work_dir: Path, name: str) -> ServerProcess:
    server = ServerProcess(fake_server_command(FakeEngineConfig(), free_port()), work_dir / f"fake-engine-{name}.log")
    server.start(StartLimits(timeout_s=60))
    return server


def server_arrivals(server: ServerProcess) -> list:
    with urllib.request.urlopen(server.command.base_url + "/arrivals", timeout=60) as response:
        return json.loads(response.read())


def vllm_bench_point(records, model_dir: Path, work_dir: Path) -> dict:
    """The same request times and prompt sizes sent by ``vllm bench serve`` (open loop, token ids)."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    start = min(r.scheduled_at for r in records)
    trace = work_dir / "vllm-bench-trace.jsonl"
    next_hash = 0
    with open(trace, "w") as handle:
        for record in sorted(records, key=lambda r: r.scheduled_at):
            blocks = -(-record.prompt_tokens // 16)  # the dataset expands one hash id into 16 tokens
            handle.write(json.dumps({"timestamp": record.scheduled_at - start, "input_length": record.prompt_tokens,
                                     "output_length": record.completion_tokens,
                                     "hash_ids": list(range(next_hash, next_hash + blocks))}) + "\n")  # fmt: skip
            next_hash += blocks
    server = start_fake_engine(work_dir, "vllm-bench")
    try:
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        args = parser.parse_args(["--backend", "openai", "--base-url", server.command.base_url, "--endpoint",
                                  "/v1/completions", "--model", "tiny", "--tokenizer", str(model_dir), "--dataset-name",
                                  "timed_trace", "--dataset-path", str(trace), "--num-prompts", str(len(records)),
                                  "--disable-tqdm"])  # fmt: skip
        started = _cpu_s()
        result = bench_main(args)
        cpu_s = _cpu_s() - started
        arrivals = [at for at, _, _ in server_arrivals(server)]
    finally:
        server.stop()
    scheduled = [r.scheduled_at for r in records]
    # Requests that never reached the server leave no arrival to pair: lags are then not comparable.
    lags = lag_figures(offset_free_lags_ms(scheduled, arrivals)) if len(arrivals) == len(scheduled) else {
        "p50_lag_ms": None, "p99_lag_ms": None, "max_lag_ms": None}  # fmt: skip
    return {
        "completed": result["completed"],
        "lost_requests": len(scheduled) - len(arrivals),
        "achieved_rate": round((len(arrivals) - 1) / (max(arrivals) - min(arrivals)), 2),
        **lags,
        "mean_ttft_ms": round(result.get("mean_ttft_ms", float("nan")), 1),
        "cpu_ms_per_request": round(cpu_s * 1000 / len(records), 3),
    }


def measure_point(jps: float, duration_s: float, processes: int, scale: float, counter, work_dir: Path) -> dict:
    started = time.monotonic()
    plan = build_plan(WorkloadSpec(jps=jps, duration_s=duration_s, scale=scale), counter)
    planned_s = time.monotonic() - started
    server = start_fake_engine(work_dir, f"{jps:g}")
    try:
        epoch = time.time() + START_LEAD_S
        shards = [(plan.shard(i, processes), server.command.base_url, epoch) for i in range(processes)]
        if processes == 1:
            outcomes = [run_shard(shards[0])]
        else:
            with multiprocessing.get_context("fork").Pool(processes) as pool:
                outcomes = pool.map(run_shard, shards)
        arrivals = {(job, turn): at for at, job, turn in server_arrivals(server)}
    finally:
        server.stop()
    records = merge_shards([result for result, _ in outcomes]).requests
    lags_ms = np.array([(arrivals[(r.job_id, r.turn)] - (epoch + r.scheduled_at)) * 1000 for r in records
                        if (r.job_id, r.turn) in arrivals])  # fmt: skip
    scheduled = np.array([r.scheduled_at for r in records])
    arrived = np.array(sorted(arrivals.values()))
    target_rate = (len(scheduled) - 1) / (scheduled.max() - scheduled.min())
    achieved_rate = (len(arrived) - 1) / (arrived.max() - arrived.min())
    point = {
        "jps": jps,
        "duration_s": duration_s,
        "processes": processes,
        "requests": len(records),
        "lost_requests": len(records) - len(lags_ms),
        "failed_requests": sum(not r.status.is_ok for r in records),
        "max_prompt_tokens": max((r.prompt_tokens or 0) for r in records),
        "target_rate": round(target_rate, 2),
        "achieved_rate": round(achieved_rate, 2),
        "rate_error_pct": round((achieved_rate - target_rate) / target_rate * 100, 3),
        **lag_figures(lags_ms),
        "offset_free": lag_figures(offset_free_lags_ms([r.scheduled_at for r in records], list(arrivals.values()))),
        "cpu_ms_per_request": round(sum(cpu for _, cpu in outcomes) * 1000 / len(records), 3),
        # The client's own share of the lag (send minus scheduled), to tell client from wire and server.
        "client_p99_lag_ms": round(float(np.percentile([r.dispatch_lag_s * 1000 for r in records], 99)), 3),
        "plan_build_s": round(planned_s, 1),
    }
    return point, records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jps", type=float, nargs="+", default=[15, 150], help="load points (the first: the source study's heaviest)")
    parser.add_argument("--duration-s", type=float, nargs="+", default=[45, 10], help="arrival window per point")
    parser.add_argument("--processes", type=int, default=1, help="client processes per point")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--no-vllm-bench", action="store_true", help="skip the vllm bench serve comparison")
    args = parser.parse_args(argv)
    if len(args.duration_s) != len(args.jps):
        parser.error("--duration-s takes one window per --jps point")
    model_dir = ensure_tiny_model()
    counter = token_counter_for(str(model_dir))
    work_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "kvsweep-bench-loadgen"
    work_dir.mkdir(parents=True, exist_ok=True)
    points = []
    for jps, duration_s in zip(args.jps, args.duration_s):
        point, records = measure_point(jps, duration_s, args.processes, args.scale, counter, work_dir)
        print(f"JPS {jps:g}: {point['requests']} requests, target {point['target_rate']}/s achieved "
              f"{point['achieved_rate']}/s, lag p50 {point['p50_lag_ms']} ms p99 {point['p99_lag_ms']} ms max "
              f"{point['max_lag_ms']} ms, {point['cpu_ms_per_request']} ms CPU per request", flush=True)  # fmt: skip
        if not args.no_vllm_bench:
            point["vllm_bench"] = bench = vllm_bench_point(records, model_dir, work_dir)
            print(f"  vllm bench serve, same times: achieved {bench['achieved_rate']}/s, {bench['lost_requests']} lost, "
                  f"offset-free lag p50 {bench['p50_lag_ms']} p99 {bench['p99_lag_ms']} max {bench['max_lag_ms']} ms "
                  f"(kvsweep offset-free: p99 {point['offset_free']['p99_lag_ms']} ms), mean TTFT {bench['mean_ttft_ms']} "
                  f"ms, {bench['cpu_ms_per_request']} ms CPU per request", flush=True)  # fmt: skip
        points.append(point)
    print(json.dumps({"points": points, "cpus": os.cpu_count(), "scale": args.scale}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
