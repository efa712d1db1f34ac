"""``python -m orchestrator.doctor``: the first command on a new cluster, and the proof that a cluster
measures what a sweep claims.

Per GPU type that is up (or the ``--gpus`` named), on one node of it: the NVIDIA driver against the CUDA
runtime torch was built for, torch seeing the GPU, vLLM importing, LMCache's compiled ops loading, the
model's weights readable; then one short cell per policy with the evidence that the policy did what it
claims (Continuum's pins carried KV to the next turn, an offload tier stored bytes, prefix hits for the
stock scheduler), the replica's start time, and a reset proven clean. One table; exit 1 on any failure.
Without a GPU it runs the CPU engine's subset and lists what it could not check.

    python -m orchestrator.doctor [--ray-address ADDR] [--gpus H100,A100] [--policies ...] [--model NAME]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.gpus import CPU, GPU_TYPES
from orchestrator.policies import cpu_policy_names, get_policy
from orchestrator.records.cell import CellOutcome, NodeStack
from orchestrator.records.trace import Unpin, read_trace
from orchestrator.replica.stack import PINNED, read_node_stack
from orchestrator.sweep.cells import CellSpec, expand
from orchestrator.sweep.spec import TINY_MODEL, EngineKind, EngineOptions, RunLimits, SweepSpec
from orchestrator.units import GIB
from orchestrator.validation import InputError, first_line
from orchestrator.workload.spec import WorkloadSpec

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
GPU_POLICIES = ("fcfs", "continuum", "lmcache", "native-offload")
CPU_POLICIES = ("fcfs", "continuum")
# The oldest driver of each CUDA major version's wheels (NVIDIA's minor-version compatibility rule).
MIN_DRIVER_FOR_CUDA = {12: 525, 13: 580}


@dataclass(frozen=True)
class Check:
    target: str  # the GPU type, or cpu
    name: str
    ok: bool | None  # None: not checked here (said why in detail)
    detail: str

    @property
    def verdict(self) -> str:
        return {True: "ok", False: "FAIL", None: "not checked"}[self.ok]


# -- on the node ---------------------------------------------------------------------------------------


def node_checks(target: str, model: str) -> list[Check]:
    """What a replica on this node needs, checked here (run on the node, inside its GPU reservation)."""
    stack = read_node_stack()
    checks = [Check(target, "serving stack", stack.vllm is not None, _stack_line(stack))]
    if target != CPU:
        checks += [_driver_check(target, stack), _torch_sees_gpu(target)]
        ops = stack.lmcache_ops_error
        checks.append(Check(target, "LMCache compiled ops", ops is None, "lmcache.cuda_ops loaded" if ops is None else ops))
    checks += [_imports(target, "vllm"), _weights_check(target, model)]
    return checks


def _stack_line(stack: NodeStack) -> str:
    found = f"vllm {stack.vllm}, lmcache {stack.lmcache}, torch {stack.torch}, CUDA {stack.cuda}, driver {stack.driver}"
    return f"{found} (tested: vllm {PINNED['vllm']}, lmcache {PINNED['lmcache']}, torch {PINNED['torch']})"


def _driver_check(target: str, stack: NodeStack) -> Check:
    if stack.cuda is None or stack.driver is None:
        return Check(target, "driver vs CUDA", False, f"torch CUDA runtime {stack.cuda}, NVIDIA driver {stack.driver}")
    major = int(stack.cuda.split(".")[0])
    needed = MIN_DRIVER_FOR_CUDA.get(major)
    driver_major = int(stack.driver.split(".")[0])
    ok = needed is not None and driver_major >= needed
    return Check(target, "driver vs CUDA", ok, f"driver {stack.driver} for CUDA {stack.cuda} (needs >= {needed})")


def _python(code: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)


def _torch_sees_gpu(target: str) -> Check:
    result = _python("import torch; print(torch.cuda.is_available() and torch.cuda.get_device_name(0))")
    seen = result.stdout.strip().splitlines()[-1] if result.returncode == 0 and result.stdout.strip() else ""
    ok = bool(seen) and seen != "False"
    return Check(target, "torch sees the GPU", ok, seen if ok else first_line(RuntimeError(result.stderr or "no GPU")))


def _imports(target: str, module: str) -> Check:
    result = _python(f"import {module}")
    last = (result.stderr.strip().splitlines() or [""])[-1]
    return Check(target, f"{module} imports", result.returncode == 0, "imported" if result.returncode == 0 else last)


def _weights_check(target: str, model: str) -> Check:
    from orchestrator.models.tiny import ensure_tiny_model

    try:
        if model == TINY_MODEL:
            folder = ensure_tiny_model()
        elif Path(model).is_dir():
            folder = Path(model)
        else:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(model, local_files_only=True))
        weights = sorted(folder.glob("*.safetensors"))
        if not (folder / "config.json").is_file() or not weights:
            return Check(target, "weights readable", False, f"{folder} has no config.json or *.safetensors")
        with open(weights[0], "rb") as handle:
            handle.read(8)
        size_gib = sum(path.stat().st_size for path in weights) / GIB
        return Check(target, "weights readable", True, f"{model}: {len(weights)} file(s), {size_gib:.1f} GiB in {folder}")
    except Exception as error:  # not in the cache, unreadable, or a hub error
        hint = f"; fetch it on the node with `hf download {model}` (gated models: `hf auth login` first)"
        return Check(target, "weights readable", False, f"{model}: {first_line(error)}{hint if model != TINY_MODEL else ''}")


# -- short cells ---------------------------------------------------------------------------------------


def doctor_cells(target: str, policies: Iterable[str], model: str, duration_s: float) -> list[CellSpec]:
    """One short cell per policy on ``target``: a few jobs at 1 JPS (a CPU tier of 16 GiB where one is used)."""
    on_cpu = target == CPU
    policies = tuple(policies)
    spec = SweepSpec(
        name="doctor",
        engine=EngineKind.VLLM,
        gpus=(target,),
        policies=policies,
        jps=(1,),
        dram_gb=(16,) if any(get_policy(name).cpu_tier for name in policies) else (0,),
        model=model,
        workload=WorkloadSpec(jps=1, duration_s=duration_s, scale=0.25 if on_cpu else 1.0, request_timeout_s=300,
                              job_timeout_s=600),
        engine_options=EngineOptions(num_kv_blocks=2400) if on_cpu else EngineOptions(),
    )  # fmt: skip
    return expand(spec)


def cell_evidence(target: str, cell: CellSpec, outcome: CellOutcome, reset: str | None, reset_error: str | None) -> list[Check]:
    """What the short cell shows: it completed, how long the replica took to start, what the policy did,
    and whether a reset after it was proven clean."""
    name = f"cell {cell.policy}"
    if not outcome.status.is_done:
        return [Check(target, name, False, f"{outcome.status.value}: {outcome.reason}")]
    jobs_done = sum(job.status.is_completed for job in outcome.jobs)
    start_s = outcome.config.replica_start_s
    checks = [Check(target, name, jobs_done == len(outcome.jobs) > 0,
                    f"{jobs_done}/{len(outcome.jobs)} jobs completed; replica started in {start_s:.1f} s")]  # fmt: skip
    checks.append(_policy_evidence(target, cell, outcome))
    expected_unclean = get_policy(cell.policy).cpu_tier == "lmcache"
    if reset_error is None:
        checks.append(Check(target, f"reset {cell.policy}", True, f"proven clean: {reset}"))
    else:
        note = " (expected: vLLM's LMCache connector keeps its tier; sweeps give each such cell a fresh replica)"
        checks.append(Check(target, f"reset {cell.policy}", expected_unclean, reset_error + (note if expected_unclean else "")))
    return checks


def _policy_evidence(target: str, cell: CellSpec, outcome: CellOutcome) -> Check:
    policy = get_policy(cell.policy)
    name = f"{cell.policy} did its job"
    if policy.pins is not None:
        events = read_trace(outcome.scheduler_trace)
        carried = sum(isinstance(event, Unpin) and event.reason == "next_turn" for event in events)
        return Check(target, name, carried > 0, f"{carried} pins carried a job's KV to its next turn")
    if policy.cpu_tier is not None:
        counters = outcome.config.tier_counters
        stored, loaded = counters.kv_offload_store_bytes or 0.0, counters.kv_offload_load_bytes or 0.0
        return Check(target, name, stored > 0, f"CPU tier stored {stored / GIB:.2f} GiB, loaded {loaded / GIB:.2f} GiB")
    later = [r for r in outcome.requests if r.turn and r.turn > 1 and r.best_cached_tokens]
    hit = sum(r.cached_tokens or 0 for r in later) / max(1, sum(r.best_cached_tokens for r in later))
    return Check(target, name, hit > 0.5, f"turns 2+ hit {hit:.0%} of their best prefix-cache share")


# -- the command ---------------------------------------------------------------------------------------


def run_doctor(targets: list[str], policies: dict[str, tuple[str, ...]], model_for: dict[str, str],
               duration_s: float) -> list[Check]:  # fmt: skip
    """Every check on every target of the connected cluster."""
    import ray

    from orchestrator.sweep.autoscaler import read_launchable_types
    from orchestrator.sweep.cluster import read_inventory
    from orchestrator.sweep.worker import worker_actor_class

    inventory = read_inventory(read_launchable_types())
    checks = []
    for target in targets:
        if not inventory.is_up(target):
            where = inventory.availability(target)
            checks.append(Check(target, "node", False, f"no {target} node is up ({where}); start one, then run the doctor again"))
            continue
        cells = doctor_cells(target, policies[target], model_for[target], duration_s)
        slot = inventory.slots(target, max(cell.replica_host_gib for cell in cells))[0]
        print(f"doctor: checking a {target} node ({slot.node_id[:8]}) ...", flush=True)
        remote_checks = ray.remote(node_checks).options(**slot.actor_options())
        node = ray.get(remote_checks.remote(target, model_for[target]))
        checks += node
        if not all(check.ok for check in node if check.name in ("serving stack", "vllm imports", "weights readable")):
            checks.append(Check(target, "short cells", None, "skipped: the node cannot serve the model (see above)"))
            continue
        worker = worker_actor_class().options(**slot.actor_options()).remote(slot.node_id)
        try:
            for cell in cells:
                print(f"doctor: {cell.label} ...", flush=True)
                outcome = ray.get(worker.run.remote(cell, RunLimits(health_timeout_s=900, client_actors=0)))
                reset, reset_error = None, None
                if outcome.status.is_done:
                    try:
                        proof = ray.get(worker.prove_reset.remote())
                        reset = f"canary hit {proof.cached_before} tokens before, {proof.cached_after} after"
                    except ray.exceptions.RayTaskError as error:
                        reset_error = str(error).strip().splitlines()[-1]
                checks += cell_evidence(target, cell, outcome, reset, reset_error)
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


def format_table(checks: list[Check]) -> str:
    widths = [max(len(header), *(len(getattr(c, column)) for c in checks))
              for header, column in (("target", "target"), ("check", "name"))]  # fmt: skip
    verdict_width = max(len("result"), *(len(c.verdict) for c in checks))
    lines = [f"{'target':<{widths[0]}}  {'check':<{widths[1]}}  {'result':<{verdict_width}}  detail"]
    for c in checks:
        lines.append(f"{c.target:<{widths[0]}}  {c.name:<{widths[1]}}  {c.verdict:<{verdict_width}}  {c.detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from orchestrator.sweep.connect import connect_ray

    p = argparse.ArgumentParser(prog="python -m orchestrator.doctor", description=__doc__.split("\n\n")[0])
    p.add_argument("--ray-address", help="default: RAY_ADDRESS, a running local cluster, or a new one")
    p.add_argument("--gpus", help="GPU types to check (default: every type with a node up; cpu where none is)")
    p.add_argument("--policies", help=f"default: {','.join(GPU_POLICIES)} on GPU, {','.join(CPU_POLICIES)} on cpu")
    p.add_argument("--model", default=LLAMA_8B, help=f"model of the GPU cells (the cpu engine serves its tiny model); default: {LLAMA_8B}")
    p.add_argument("--duration-s", type=float, default=5.0, help="arrival window of each short cell; default: 5")
    args = p.parse_args(argv)
    try:
        chosen = [gpu for gpu in (args.gpus or "").split(",") if gpu]
        for gpu in chosen:
            if gpu not in [*GPU_TYPES, CPU]:
                raise InputError(f"--gpus: unknown GPU type {gpu!r}; known: {', '.join([*GPU_TYPES, CPU])}")
        connect_ray(args.ray_address)
        if not chosen:
            from orchestrator.sweep.cluster import read_inventory

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
    checks = run_doctor(chosen, policies, models, args.duration_s) + not_checked_here(chosen)
    print(format_table(checks), flush=True)
    failed = [c for c in checks if c.ok is False]
    print(f"doctor: {len(failed)} failed, {sum(c.ok is True for c in checks)} ok, {sum(c.ok is None for c in checks)} not checked")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
