"""What the CPU engine's executor costs: one cell of the tiny model served with its one rank inside the engine core
(vLLM's uniprocess executor, the project's command) and in a worker process of its own (vLLM's multiprocess
executor, which the CPU platform picks unless V1 multiprocessing is off).

    python benchmarks/cpu_executor.py [--trials 2] [--jps 2] [--duration-s 10]

Each trial serves the same cell on each executor in turn (alternating, so that a drift of the machine's pace falls
on both), each server forked from one launcher as a cell worker's are, and counts the CPU seconds its process group
used over the load (from /proc) and the cell's mean job completion time. The multiprocess executor's engine core and
worker each spin for a second after every message they read, so its replica keeps two cores busy while it serves.
Prints a table of medians per executor, then one JSON line. The CPU engine's speed is the machine's: run it on a
quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.models.tiny import ensure_tiny_model
from orchestrator.records.cell import RequestOptions
from orchestrator.replica.config import VllmEngineConfig
from orchestrator.replica.launcher import start_launcher, vllm_preload
from orchestrator.replica.server import ServerProcess, free_port, group_activity
from orchestrator.replica.vllm_server import shared_environment, vllm_server_command
from orchestrator.workload.actor import InProcessRun
from orchestrator.workload.plan import build_plan
from orchestrator.workload.schedule import schedule_for
from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.tokenizer import token_counter_for

# vLLM's multiprocess executor for one rank, as the CPU platform picks it by default: the last --distributed-executor-
# backend on the command line wins, and the server's environment takes extra_env last.
EXECUTORS = {
    "in-process": {},
    "multiprocess": {"extra_args": ("--distributed-executor-backend", "mp"),
                     "extra_env": (("VLLM_ENABLE_V1_MULTIPROCESSING", "1"),)},
}  # fmt: skip
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def engine_config(executor: str, model: str) -> VllmEngineConfig:
    base = VllmEngineConfig(model=model, served_model_name="tiny", num_kv_blocks=2400)
    return base.model_copy(update=EXECUTORS[executor])


def serve_cell(executor: str, workload: WorkloadSpec, client, work_dir: Path) -> dict[str, float]:
    """One cell on a fresh server of ``executor``: the CPU seconds its process group used over the load, and the
    mean job completion time."""
    model = str(ensure_tiny_model())
    command = vllm_server_command(engine_config(executor, model), port=free_port()).forked()
    log_path = work_dir / f"{executor}-{time.monotonic_ns()}.log"
    log_path.touch()
    server = ServerProcess(command, log_path, client)
    server.start()
    try:
        plan = build_plan(workload, token_counter_for(model), schedule_for(workload))
        ticks_before, _ = group_activity(server.pid)
        shard = InProcessRun(plan, command.base_url, RequestOptions("tiny")).result()
        ticks_after, _ = group_activity(server.pid)
    finally:
        server.stop()
    completed = [job for job in shard.jobs if job.status.is_completed]
    if len(completed) != len(shard.jobs):
        raise RuntimeError(f"{executor}: {len(shard.jobs) - len(completed)} of {len(shard.jobs)} jobs did not complete")
    return {"server_cpu_s": (ticks_after - ticks_before) / TICKS_PER_S,
            "jct_mean_s": statistics.mean(job.jct_s for job in completed)}  # fmt: skip


def summarize(trials: dict[str, list[dict[str, float]]]) -> dict:
    """Medians per executor, and the multiprocess executor's over the in-process one's, each from one run."""
    medians = {executor: {name: statistics.median(trial[name] for trial in runs) for name in runs[0]}
               for executor, runs in trials.items()}  # fmt: skip
    ratios = {name: medians["multiprocess"][name] / medians["in-process"][name] for name in medians["in-process"]}
    return {"medians": medians, "multiprocess_over_in_process": ratios, "trials": trials}


def print_table(summary: dict) -> None:
    medians = summary["medians"]
    print(f"\n{'executor':<14}{'server CPU s':>14}{'mean JCT s':>12}")
    for executor, values in medians.items():
        print(f"{executor:<14}{values['server_cpu_s']:>14.1f}{values['jct_mean_s']:>12.2f}")
    ratios = summary["multiprocess_over_in_process"]
    print(f"multiprocess / in-process: server CPU {ratios['server_cpu_s']:.2f}x, mean JCT {ratios['jct_mean_s']:.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=2, help="cells per executor (default: 2)")
    parser.add_argument("--jps", type=float, default=2.0, help="job arrival rate (default: 2)")
    parser.add_argument("--duration-s", type=float, default=10.0, help="arrival window in seconds (default: 10)")
    args = parser.parse_args(argv)
    workload = WorkloadSpec(jps=args.jps, duration_s=args.duration_s, scale=0.25)
    trials: dict[str, list[dict[str, float]]] = {executor: [] for executor in EXECUTORS}
    with tempfile.TemporaryDirectory(prefix="kvsweep-executor-") as work:
        work_dir = Path(work)
        launcher_process, client = start_launcher(work_dir / "launcher.sock", vllm_preload("cpu"),
                                                  {**os.environ, **shared_environment()})  # fmt: skip
        try:
            for trial in range(args.trials):
                for executor in EXECUTORS:
                    trials[executor].append(serve_cell(executor, workload, client, work_dir))
                    print(f"trial {trial} {executor}: {trials[executor][-1]}", file=sys.stderr, flush=True)
        finally:
            launcher_process.stdin.close()
            launcher_process.wait(timeout=30)
    summary = summarize(trials)
    print_table(summary)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
