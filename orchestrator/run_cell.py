"""Command line: one real cell on the CPU vLLM engine (or any local model), summary on one screen.

    python -m orchestrator.run_cell --jps 1 --duration-s 20 --scale 0.25 --kv-blocks 2400 --out results/cell

It runs the cell exactly as a sweep's worker does (same replica, load generator and watchdog), in this
process, without tracking. Bad input fails before the server starts, with one line naming the value.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from orchestrator.gpus import CPU
from orchestrator.policies import POLICIES
from orchestrator.records.render import render_cell_summary
from orchestrator.records.summary import summarize
from orchestrator.records.layout import CellFiles
from orchestrator.sweep.cells import CellSpec
from orchestrator.sweep.results import write_attempt_files
from orchestrator.sweep.spec import TINY_MODEL, EngineKind, EngineOptions, RunLimits, SweepSpec
from orchestrator.sweep.worker import CellWorker
from orchestrator.validation import one_line
from orchestrator.workload.spec import WorkloadSpec


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m orchestrator.run_cell", description=__doc__.split("\n")[0])
    p.add_argument("--policy", default="fcfs", help=f"KV policy, one of: {', '.join(POLICIES)}")
    p.add_argument("--dram-gb", type=float, default=0.0, help="CPU DRAM budget for policies with a CPU tier")
    p.add_argument("--model", default=TINY_MODEL, help="'tiny' (generated offline) or a local model directory")
    p.add_argument("--jps", type=float, default=1.0, help="job arrival rate (jobs per second)")
    p.add_argument("--duration-s", type=float, default=20.0, help="arrival window in seconds")
    p.add_argument("--scale", type=float, default=0.25, help="multiplies system prompt and tool output sizes")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--kv-blocks", type=int, default=2400, help="KV pool size in blocks (constrains the cache)")
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--request-timeout-s", type=float, default=300.0)
    p.add_argument("--job-timeout-s", type=float, default=900.0)
    p.add_argument("--client-actors", type=int, default=0, help="0: drive from this process; N: N Ray actors")
    p.add_argument("--out", type=Path, default=Path("results/cell"), help="directory for the cell's records")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        workload = WorkloadSpec(
            jps=args.jps,
            duration_s=args.duration_s,
            scale=args.scale,
            seed=args.seed,
            request_timeout_s=args.request_timeout_s,
            job_timeout_s=args.job_timeout_s,
        )
        options = EngineOptions(block_size=args.block_size, num_kv_blocks=args.kv_blocks, max_num_seqs=args.max_num_seqs)
        limits = RunLimits(health_timeout_s=300, client_actors=args.client_actors)
        # The same checks as a one-cell sweep: known policy, one the CPU engine can run, sane values.
        SweepSpec(name="cell", engine=EngineKind.VLLM, gpus=(CPU,), policies=(args.policy,), jps=(args.jps,),
                  dram_gb=(args.dram_gb,), model=args.model, workload=workload, engine_options=options)  # fmt: skip
    except ValidationError as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    cell = CellSpec(engine=EngineKind.VLLM, gpu=CPU, policy=args.policy, dram_gb=args.dram_gb, model=args.model,
                    workload=workload, engine_options=options)  # fmt: skip
    if args.client_actors:
        import ray

        ray.init(include_dashboard=False, log_to_driver=False)
    print(f"cell {cell.label} ({cell.key}): starting vLLM", flush=True)
    worker = CellWorker()
    try:
        outcome = worker.run(cell, limits)
    finally:
        worker.shutdown()
    summary = summarize(outcome.requests, outcome.jobs, outcome.scheduler_trace) if outcome.status.is_done else None
    write_attempt_files(CellFiles(args.out), outcome, summary, row=None)
    if summary is None:
        print(f"cell {outcome.status.value}: {outcome.reason}; server log in {args.out}", file=sys.stderr)
        return 1
    facts = outcome.config.engine_facts
    render_cell_summary(
        f"cell policy={cell.policy} jps={cell.jps:g} scale={workload.scale:g} KV pool {facts.num_kv_blocks} blocks x "
        f"{facts.block_size} tokens on {facts.device_name} (vLLM {facts.vllm_version}); records in {args.out}",
        summary,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
