"""``python -m orchestrator.doctor``: the first command on a new cluster, and the proof that a cluster
measures what a sweep claims.

Per GPU type that is up (or the ``--gpus`` named), on one node of it: the serving stack (a tested
combination of vLLM, LMCache and torch, ``orchestrator.replica.tested_stacks``), the NVIDIA driver against the CUDA
runtime torch was built for, torch seeing the GPU, vLLM importing, LMCache's compiled ops loading, the
model's weights readable; then one short cell per policy with the evidence that the policy did what it
claims (Continuum's pins carried KV to the next turn, an offload tier stored bytes, prefix hits for the
stock scheduler), the replica's start time, its KV pool against the sizing library's prediction, and a
reset proven clean (``orchestrator.evidence.checks``). First, the cluster's authentication: each node's Ray
authentication mode, and a failure where the head's job API runs jobs for anyone who reaches it (no token asked,
on an address beyond loopback). One table; exit 1 on any failure.
Without a GPU it runs the CPU engine's subset and lists what it could not check.

    python -m orchestrator.doctor [--ray-address ADDR] [--gpus H100,A100] [--policies ...] [--model NAME]
                                  [--weights real|dummy] [--duration-s F] [--auth-only]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from orchestrator.cell.spec import CellSpec, EngineKind
from orchestrator.evidence.checks import Check, can_serve, checked_cell, format_table, node_checks
from orchestrator.gpus import CPU, GPU_TYPES
from orchestrator.inputs.parser import command_parser
from orchestrator.inputs.validation import InputError
from orchestrator.mechanisms.tier import NodeNeed
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.models.served import Weights
from orchestrator.policies.catalog import cpu_policy_names, get_policy, policies_covering_every_mechanism
from orchestrator.replica.priority import at_normal_priority
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import EngineOptions, RunLimits, SweepSpec, TINY_MODEL
from orchestrator.workload.spec import WorkloadSpec

GPU_POLICIES = policies_covering_every_mechanism("gpu")
CPU_POLICIES = policies_covering_every_mechanism(CPU)


# -- short cells ---------------------------------------------------------------------------------------


def doctor_cells(target: str, policies: Iterable[str], model: str, duration_s: float,
                 weights: Weights = Weights.REAL) -> list[CellSpec]:
    """One short cell per policy on ``target``: a few jobs at 1 JPS (a CPU tier of 16 GiB where one is used)."""
    on_cpu = target == CPU
    policies = tuple(policies)
    spec = SweepSpec(
        name="doctor",
        engine=EngineKind.VLLM,
        gpus=(target,),
        policies=policies,
        jps=(1,),
        dram_gb=(max(get_policy(name).dram_gb_taken(16) for name in policies),),
        model=model,
        weights=weights,
        workload=WorkloadSpec(jps=1, duration_s=duration_s, scale=0.25 if on_cpu else 1.0, request_timeout_s=300,
                              job_timeout_s=600),
        engine_options=EngineOptions(num_kv_blocks=2400) if on_cpu else EngineOptions(),
    )  # fmt: skip
    return expand(spec)


# -- authentication ------------------------------------------------------------------------------------


def authentication_checks() -> list[Check]:
    """Each live node's Ray authentication mode (read by a task on it: a task's process has its raylet's
    environment), then whether the head's job API asks for a token. Fails only the job API that answers
    without one on an address beyond loopback: anyone who reaches it can run code on every node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from orchestrator.sweep.cluster.auth import auth_mode_here

    nodes = [node for node in ray.nodes() if node["Alive"]]
    read_mode = ray.remote(num_cpus=0)(auth_mode_here)
    on_each = [NodeAffinitySchedulingStrategy(node["NodeID"], soft=False) for node in nodes]
    modes = ray.get([read_mode.options(scheduling_strategy=strategy).remote() for strategy in on_each], timeout=120)
    checks = []
    for node, mode in zip(nodes, modes, strict=True):
        head = " (head)" if "node:__internal_head__" in node["Resources"] else ""
        detail = "token" if mode == "token" else "disabled: whoever reaches this node's Ray ports can run code on it"
        checks.append(Check(f"node {node['NodeManagerAddress']}{head}", "authentication", True, detail))
    return checks + [_job_api_check(ray._private.worker.get_dashboard_url())]


def _job_api_check(dashboard_address: str | None) -> Check:
    from orchestrator.sweep.cluster.auth import is_loopback, job_api_answers_without_token

    if not dashboard_address:
        return Check("cluster", "job API", True, "no dashboard: the head serves no job API")
    host = dashboard_address.rpartition(":")[0]
    open_to_all = job_api_answers_without_token(dashboard_address)
    if open_to_all is None:
        return Check("cluster", "job API", None, f"{dashboard_address} did not answer as a job API from here")
    if not open_to_all:
        return Check("cluster", "job API", True, f"{dashboard_address} refuses requests without the token")
    if is_loopback(host):
        return Check("cluster", "job API", True, f"{dashboard_address} asks for no token, on loopback only")
    return Check("cluster", "job API", False,
                 f"{dashboard_address} runs jobs for anyone who reaches it (no token asked); start Ray with "
                 "RAY_AUTH_MODE=token (deploy/ recipes, docs/clusters.md) or bind the dashboard to 127.0.0.1")  # fmt: skip


# -- the command ---------------------------------------------------------------------------------------


def run_doctor(targets: list[str], policies: dict[str, tuple[str, ...]], model_for: dict[str, str],
               duration_s: float, weights: Weights) -> list[Check]:  # fmt: skip
    """Every check on every target of the connected cluster."""
    import ray

    from orchestrator.sweep.cluster.autoscaler import read_launchable_types
    from orchestrator.sweep.cluster.inventory import read_inventory
    from orchestrator.sweep.runtime.worker import start_worker

    inventory = read_inventory(read_launchable_types())
    checks = []
    for target in targets:
        if not inventory.is_up(target):
            where = inventory.availability(target)
            checks.append(Check(target, "node", False, f"no {target} node is up ({where}); start one, then run the doctor again"))
            continue
        cells = doctor_cells(target, policies[target], model_for[target], duration_s, weights)
        slot = inventory.slots(target, max(cell.replica_host_gib for cell in cells))[0]
        print(f"doctor: checking a {target} node ({slot.node_id[:8]}) ...", flush=True)
        remote_checks = ray.remote(node_checks).options(**at_normal_priority(slot.actor_options()))
        needs_lmcache = any(NodeNeed.LMCACHE in get_policy(cell.policy).needs for cell in cells)
        node = ray.get(remote_checks.remote(target, model_for[target], weights, needs_lmcache))
        checks += node
        if not can_serve(node):
            checks.append(Check(target, "short cells", None, "skipped: the node cannot serve the model (see above)"))
            continue
        worker = start_worker(slot)
        try:
            limits = RunLimits(health_timeout_s=900, client_actors=0)
            for cell in cells:
                print(f"doctor: {cell.label} ...", flush=True)
                _, evidence = checked_cell(target, cell, lambda cell: ray.get(worker.run.remote(cell, limits)),
                                           lambda: ray.get(worker.prove_reset.remote()))  # fmt: skip
                checks += evidence
        finally:
            ray.get(worker.shutdown.remote())
            ray.kill(worker)
    return checks


def not_checked_here(targets: list[str]) -> list[Check]:
    """What the run could not check: the GPU types it had no node of, and the GPU-only checks on cpu."""
    rows = [Check(gpu, "everything", None, "no node of this type checked") for gpu in GPU_TYPES if gpu not in targets]
    if CPU in targets:
        rows.append(Check(CPU, "GPU-only checks", None, "driver vs CUDA, LMCache ops, lmcache/offload cells: need a GPU"))
    return rows


def parser() -> argparse.ArgumentParser:
    p = command_parser("doctor", __doc__)
    p.add_argument("--ray-address", help="default: RAY_ADDRESS, a running local cluster, or a new one")
    p.add_argument("--gpus", help="GPU types to check (default: every type with a node up; cpu where none is)")
    p.add_argument("--policies", help=f"default: {','.join(GPU_POLICIES)} on GPU, {','.join(CPU_POLICIES)} on cpu")
    p.add_argument("--model", default=LLAMA_8B, help=f"model of the GPU cells (the cpu engine serves its tiny model); default: {LLAMA_8B}")
    p.add_argument("--weights", choices=[weights.value for weights in Weights], default=Weights.REAL.value,
                   help="real: the model's own weights, which every node must have; dummy: random weights of its "
                   "shapes, nothing to download; default: real")
    p.add_argument("--duration-s", type=float, default=5.0, help="arrival window of each short cell; default: 5")
    p.add_argument("--auth-only", action="store_true",
                   help="check the cluster's authentication only (seconds: no node checks, no replica)")
    return p


def main(argv: list[str] | None = None) -> int:
    from orchestrator.sweep.cluster.connect import connect_ray

    args = parser().parse_args(argv)
    try:
        chosen = [gpu for gpu in (args.gpus or "").split(",") if gpu]
        for gpu in chosen:
            if gpu not in [*GPU_TYPES, CPU]:
                raise InputError(f"--gpus: unknown GPU type {gpu!r}; known: {', '.join([*GPU_TYPES, CPU])}")
        connect_ray(args.ray_address)
        if not chosen:
            from orchestrator.sweep.cluster.inventory import read_inventory

            chosen = sorted(read_inventory().gpu_types()) or [CPU]
        requested = tuple(name for name in (args.policies or "").split(",") if name)
        policies = {t: requested or (CPU_POLICIES if t == CPU else GPU_POLICIES) for t in chosen}
        for target, names in policies.items():
            for name in names:
                get_policy(name)
                if target == CPU and name not in cpu_policy_names():
                    raise InputError(f"--policies: {name!r} needs a GPU; on cpu use: {', '.join(cpu_policy_names())}")
        models = {t: TINY_MODEL if t == CPU else args.model for t in chosen}
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    checks = authentication_checks()
    if not args.auth_only:
        checks += run_doctor(chosen, policies, models, args.duration_s, Weights(args.weights)) + not_checked_here(chosen)
    print(format_table(checks), flush=True)
    failed = [c for c in checks if c.ok is False]
    print(f"doctor: {len(failed)} failed, {sum(c.ok is True for c in checks)} ok, {sum(c.ok is None for c in checks)} not checked")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
