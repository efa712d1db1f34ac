"""Command line: one real cell on the CPU vLLM engine (or any local model), summary on one screen.

    python -m orchestrator.run_cell --jps 1 --duration-s 20 --scale 0.25 --kv-blocks 2400 --out results/cell

Bad input fails before the server starts, with one line naming the value and what is valid.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from orchestrator.cell_runner import run_cell
from orchestrator.models.tiny import ensure_tiny_model
from orchestrator.policies import POLICIES, PolicyError, get_policy
from orchestrator.records.render import render_cell_summary
from orchestrator.replica.vllm_server import VllmEngineConfig
from orchestrator.validation import one_line
from orchestrator.workload.client import RequestOptions
from orchestrator.workload.plan import build_plan
from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.tokenizer import token_counter_for

TINY_MODEL = "tiny"


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
        policy = get_policy(args.policy)
        base = VllmEngineConfig(
            model=args.model,
            served_model_name=args.model if args.model == TINY_MODEL else Path(args.model).name,
            block_size=args.block_size,
            num_kv_blocks=args.kv_blocks,
            max_num_seqs=args.max_num_seqs,
        )
        engine = policy.engine_config(base, args.dram_gb)
    except ValidationError as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    except PolicyError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.client_actors < 0:
        print(f"error: --client-actors must be 0 or more, got {args.client_actors}", file=sys.stderr)
        return 2
    # Only now, with every input valid, do the expensive parts start.
    model_dir = str(ensure_tiny_model()) if args.model == TINY_MODEL else args.model
    engine = engine.model_copy(update={"model": model_dir})
    plan = build_plan(workload, token_counter_for(model_dir))
    print(f"planned {len(plan.jobs)} jobs over {workload.duration_s:g} s (plan {plan.fingerprint()[:12]}); starting vLLM")
    if args.client_actors:
        import ray

        ray.init(include_dashboard=False, log_to_driver=False)
    options = RequestOptions(
        model=engine.served_model_name, output_tokens=workload.output_tokens, send_priority=policy.job_priority
    )
    result = run_cell(engine, plan, args.out, options, num_client_actors=args.client_actors)
    facts = result.engine_facts
    render_cell_summary(
        f"cell policy={policy.name} jps={workload.jps:g} scale={workload.scale:g} KV pool {facts.num_kv_blocks} blocks x "
        f"{facts.block_size} tokens on {facts.device_name} (vLLM {facts.vllm_version}); records in {args.out}",
        result.summary,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
