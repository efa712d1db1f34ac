"""Command line: one real cell on this machine, on the CPU engine or its GPU, with no Ray and no tracking.

    python -m orchestrator.cli.cell --jps 1 --duration-s 20 --out results/cell            # CPU engine, tiny model
    python -m orchestrator.cli.cell --gpu H100 --policy continuum --weights dummy --out results/h100-continuum

It runs the cell exactly as a sweep's worker does (same replica, load generator and watchdog), in this
process. Before the server starts it checks the node as the doctor does (tested serving stack, driver, the
GPU, vLLM, the model's files); afterwards it proves the replica's reset and prints the doctor's evidence for
the cell (what the policy did, the KV pool against the sizing library) under the cell's summary. Bad input
fails before anything starts, with one line naming the value.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from orchestrator.cell.spec import CellSpec, EngineKind
from orchestrator.evidence.checks import can_serve, checked_cell, format_table, node_checks
from orchestrator.gpus import CPU, known_device_names
from orchestrator.inputs.parser import command_parser
from orchestrator.inputs.validation import flag_line
from orchestrator.mechanisms.tier import NodeNeed
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.models.served import Weights
from orchestrator.policies.catalog import POLICIES, get_policy
from orchestrator.records.layout import CellFiles
from orchestrator.records.render import render_cell_summary
from orchestrator.records.summary import summarize
from orchestrator.replica.priority import start_workers_at_normal_priority
from orchestrator.sweep.planning.spec import EngineOptions, RunLimits, SweepSpec, TINY_MODEL
from orchestrator.sweep.runtime.results import write_attempt_files
from orchestrator.sweep.runtime.worker import CellWorker
from orchestrator.workload.spec import WorkloadSpec

CPU_KV_BLOCKS = 2400  # the CPU engine's pool: a few JPS of the 0.25-scale workload fill it


# The cell's fields (as pydantic's errors locate them in the workload, engine options or one-cell sweep) that a flag
# of another name sets; every other field is set by the flag of its own name.
_FLAG_OF_FIELD = {("num_kv_blocks",): "kv_blocks", ("gpus",): "gpu", ("policies",): "policy"}


def parser() -> argparse.ArgumentParser:
    p = command_parser("cell", __doc__)
    p.add_argument("--gpu", default=CPU,
                   help=f"this machine's GPU type, or cpu for the CPU engine: {', '.join(known_device_names())}")
    p.add_argument("--policy", default="fcfs", help=f"KV policy, one of: {', '.join(POLICIES)}")
    p.add_argument("--dram-gb", type=float, default=0.0, help="CPU DRAM budget (GiB) for policies with a CPU tier")
    p.add_argument("--model", help=f"'tiny' (generated offline), a shipped config, a Hugging Face name or a model "
                   f"directory; default: {TINY_MODEL} on cpu, {LLAMA_8B} on a GPU")  # fmt: skip
    p.add_argument("--weights", choices=[weights.value for weights in Weights], default=Weights.REAL.value,
                   help="real: the model's own weights; dummy: random weights of its exact shapes, no download")
    p.add_argument("--jps", type=float, default=1.0, help="job arrival rate (jobs per second)")
    p.add_argument("--duration-s", type=float, default=20.0, help="arrival window in seconds")
    p.add_argument("--scale", type=float,
                   help="multiplies system prompt and tool output sizes; default: 0.25 on cpu, 1 on a GPU")
    p.add_argument("--seed", type=int, default=42, help="seeds the arrival schedule and the tool outputs")
    p.add_argument("--kv-blocks", help=f"fix the KV pool in blocks, or 'auto': vLLM sizes it (from "
                   f"--gpu-memory-utilization on a GPU, 1 GiB on cpu); default: {CPU_KV_BLOCKS} on cpu, auto on a GPU")
    p.add_argument("--block-size", type=int, help="tokens per KV block; default: 32 on cpu, 16 on a GPU")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85,
                   help="on a GPU, the share of its memory vLLM takes for the weights and KV pool")
    p.add_argument("--max-num-seqs", type=int, help="the most requests vLLM runs in one step (its --max-num-seqs); "
                   "default: vLLM's for the device")  # fmt: skip
    p.add_argument("--request-timeout-s", type=float, default=300.0,
                   help="a request not finished this long after it was sent times out")
    p.add_argument("--job-timeout-s", type=float, default=900.0,
                   help="a job not finished this long after its arrival times out (counted, never dropped)")
    p.add_argument("--client-actors", type=int, default=0, help="0: drive from this process; N: N Ray actors")
    p.add_argument("--no-checks", action="store_true", help="skip the node checks and the evidence (faster on CPU)")
    p.add_argument("--out", type=Path, default=Path("results/cell"), help="directory for the cell's records")
    return p


def cell_from(args: argparse.Namespace) -> CellSpec:
    """The cell the flags describe, checked as a one-cell sweep is (raises pydantic's ``ValidationError``)."""
    on_cpu = args.gpu == CPU
    model = args.model or (TINY_MODEL if on_cpu else LLAMA_8B)
    workload = WorkloadSpec(
        jps=args.jps,
        duration_s=args.duration_s,
        scale=args.scale if args.scale is not None else (0.25 if on_cpu else 1.0),
        seed=args.seed,
        request_timeout_s=args.request_timeout_s,
        job_timeout_s=args.job_timeout_s,
    )
    kv_blocks = args.kv_blocks or ("auto" if not on_cpu else str(CPU_KV_BLOCKS))
    options = EngineOptions(
        block_size=args.block_size,
        num_kv_blocks=None if kv_blocks == "auto" else kv_blocks,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_seqs=args.max_num_seqs,
    )
    weights = Weights(args.weights)
    # The same checks as a one-cell sweep: known GPU and policy, one the engine can run, sane values.
    SweepSpec(name="cell", engine=EngineKind.VLLM, gpus=(args.gpu,), policies=(args.policy,), jps=(args.jps,),
              dram_gb=(args.dram_gb,), model=model, weights=weights, workload=workload,
              engine_options=options)  # fmt: skip
    return CellSpec(engine=EngineKind.VLLM, gpu=args.gpu, policy=args.policy, dram_gb=args.dram_gb, model=model,
                    workload=workload, engine_options=options, weights=weights)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        cell = cell_from(args)
    except ValidationError as error:
        fields = {(dest,): dest for dest in vars(args)} | _FLAG_OF_FIELD
        print(f"error: {flag_line(error, fields, args)}", file=sys.stderr)
        return 2
    checks = []
    if not args.no_checks:
        print(f"checking this node for {cell.gpu} ...", flush=True)
        needs_lmcache = NodeNeed.LMCACHE in get_policy(cell.policy).needs
        checks = node_checks(cell.gpu, cell.model, cell.weights, needs_lmcache)
        if not can_serve(checks):
            print(format_table(checks), file=sys.stderr)
            print("kvsweep cell: this node cannot serve the cell (the FAIL rows above); nothing started", file=sys.stderr)
            return 1
    if args.client_actors:
        import ray

        start_workers_at_normal_priority()  # its client actors, where this starts a local cluster
        ray.init(include_dashboard=False, log_to_driver=False)
    print(f"cell {cell.label} ({cell.key}): starting vLLM", flush=True)
    limits = RunLimits(health_timeout_s=900 if cell.device == "gpu" else 300, client_actors=args.client_actors)
    worker = CellWorker()
    try:
        if args.no_checks:
            outcome = worker.run(cell, limits)
        else:
            outcome, evidence = checked_cell(cell.gpu, cell, lambda cell: worker.run(cell, limits), worker.prove_reset)
            checks += evidence
    finally:
        worker.shutdown()
    summary = summarize(outcome.requests, outcome.jobs, outcome.scheduler_trace) if outcome.status.is_done else None
    write_attempt_files(CellFiles(args.out), outcome, summary, row=None)
    if checks:
        print(format_table(checks), flush=True)
    if summary is None:
        print(f"cell {outcome.status.value}: {outcome.reason}; server log in {args.out}", file=sys.stderr)
        return 1
    facts = outcome.config.engine_facts
    render_cell_summary(
        f"cell policy={cell.policy} jps={cell.jps:g} scale={cell.workload.scale:g} weights={cell.weights.value}: "
        f"KV pool {facts.num_kv_blocks} blocks x {facts.block_size} tokens on {facts.device_name} "
        f"(vLLM {facts.vllm_version}); records in {args.out}",
        summary,
    )
    return 1 if any(check.ok is False for check in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
