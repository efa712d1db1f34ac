"""The checks behind the doctor and ``kvsweep cell``: what a node needs to serve a cell, and what a finished cell
shows about its policy, its replica and its KV pool. No Ray, no tracking: ``kvsweep cell`` uses them on a single
GPU box, the doctor inside a Ray task on each node type.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from orchestrator.cell.spec import CellSpec
from orchestrator.gpus import CPU, GPU_TYPES
from orchestrator.inputs.validation import first_line
from orchestrator.models.arch import load_model
from orchestrator.models.served import ModelUnavailable, Weights, served_model
from orchestrator.policies.catalog import get_policy
from orchestrator.records.cell import CellOutcome, NodeStack, ResetProof
from orchestrator.replica.priority import NORMAL_NICENESS, niced_workers_advice, niceness
from orchestrator.replica.stack import read_node_stack
from orchestrator.replica.tested_stacks import lmcache_ops_module, stack_of, untested
from orchestrator.sizing.kv import VLLM_NON_KV_OVERHEAD_GIB, Regime, size
from orchestrator.sweep.planning.preflight import preflight

# The oldest driver of each CUDA major version's wheels (NVIDIA's minor-version compatibility rule).
MIN_DRIVER_FOR_CUDA = {12: 525, 13: 580}
# The checks without which no replica can start: the cells are skipped when one fails.
BLOCKING = ("serving stack", "torch sees the GPU", "vllm imports", "weights readable")
# How far the KV pool vLLM sizes may be from the sizing library's prediction before the doctor says so.
SIZING_TOLERANCE = 0.05


@dataclass(frozen=True)
class Check:
    target: str  # the GPU type, or cpu
    name: str
    ok: bool | None  # None: not checked here (said why in detail)
    detail: str

    @property
    def verdict(self) -> str:
        return {True: "ok", False: "FAIL", None: "not checked"}[self.ok]


def can_serve(checks: list[Check]) -> bool:
    return all(check.ok for check in checks if check.name in BLOCKING)


# -- on the node ---------------------------------------------------------------------------------------


def node_checks(target: str, model: str, weights: Weights, needs_lmcache: bool) -> list[Check]:
    """What a replica on this node needs, checked here (run on the node, inside its GPU reservation);
    ``needs_lmcache``: a cell to serve has an LMCache tier. The checks that each start an interpreter and import
    torch and vLLM (seconds each) run side by side."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        stack = pool.submit(read_node_stack)
        server = pool.submit(_server_imports, target)
        sees_gpu = pool.submit(_torch_sees_gpu, target) if target != CPU else None
        checks = [stack_check(target, stack.result(), needs_lmcache)]
        if sees_gpu is not None:
            checks += [_driver_check(target, stack.result()), sees_gpu.result()]
        if needs_lmcache:
            ops, module = stack.result().lmcache_ops_error, lmcache_ops_module(stack.result().lmcache)
            checks.append(Check(target, "LMCache compiled ops", ops is None, f"{module} loaded" if ops is None else ops))
        checks += [server.result(), _weights_check(target, model, weights), _priority_check(target)]
    return checks


def _priority_check(target: str) -> Check:
    """A replica's server and clients run at the niceness of the process that starts them: on a cluster a Ray worker
    started as a cell's is (``at_normal_priority``), which this check runs in; under ``kvsweep cell`` the driver itself."""
    if (current := niceness()) > NORMAL_NICENESS:
        return Check(target, "CPU priority", False, niced_workers_advice(current))
    return Check(target, "CPU priority", True, f"servers and clients start at nice {current}")


def stack_check(target: str, stack: NodeStack, needs_lmcache: bool) -> Check:
    tested = stack_of(stack, needs_lmcache)
    runtime = f"CUDA {stack.cuda}, driver {stack.driver}"
    if tested is None:
        return Check(target, "serving stack", False, f"{untested(stack)} ({runtime})")
    found = f"vllm {stack.vllm}, lmcache {stack.lmcache}, torch {stack.torch}, {runtime}"
    return Check(target, "serving stack", True, f"{found}: tested stack {tested.name}")


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
    if not seen or seen == "False":
        why = first_line(RuntimeError(result.stderr or "no CUDA GPU visible"))
        return Check(target, "torch sees the GPU", False, why)
    if target not in seen:  # Ray's accelerator type is read from the device name, so the name contains it
        return Check(target, "torch sees the GPU", False, f"{seen}, not a {target}")
    return Check(target, "torch sees the GPU", True, seen)


# What a replica runs: its imports reach modules ``import vllm`` alone never loads (vLLM 0.26's structured-output
# backends need llguidance and xgrammar at class definition, which a GPU kit without them showed).
VLLM_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def _server_imports(target: str) -> Check:
    result = _python(f"import {VLLM_SERVER_MODULE}")
    last = (result.stderr.strip().splitlines() or [""])[-1]
    detail = f"{VLLM_SERVER_MODULE} imported" if result.returncode == 0 else last
    return Check(target, "vllm imports", result.returncode == 0, detail)


def _weights_check(target: str, model: str, weights: Weights) -> Check:
    try:
        return Check(target, "weights readable", True, served_model(model, weights).detail)
    except ModelUnavailable as error:
        return Check(target, "weights readable", False, str(error))


# -- what a cell shows ---------------------------------------------------------------------------------


def checked_cell(target: str, cell: CellSpec, run: Callable[[CellSpec], CellOutcome],
                 prove_reset: Callable[[], ResetProof]) -> tuple[CellOutcome, list[Check]]:  # fmt: skip
    """Run ``cell``, prove the replica's reset after it, and say what it shows (``run`` and ``prove_reset``
    are a worker's, in this process or through Ray)."""
    outcome = run(cell)
    reset = reset_error = None
    if outcome.status.is_done:
        try:
            proof = prove_reset()
            reset = f"canary hit {proof.cached_before} tokens before, {proof.cached_after} after"
        except Exception as error:  # ResetError here, or the same wrapped by Ray: its last line is the reason
            reset_error = (str(error).strip().splitlines() or [type(error).__name__])[-1]
    return outcome, cell_evidence(target, cell, outcome, reset, reset_error)


def cell_evidence(target: str, cell: CellSpec, outcome: CellOutcome, reset: str | None,
                  reset_error: str | None) -> list[Check]:  # fmt: skip
    """What a finished cell shows: it completed, how long the replica took to start, what the policy did,
    the KV pool vLLM sized against the sizing library's prediction, and whether a reset after it was
    proven clean."""
    name = f"cell {cell.policy}"
    if not outcome.status.is_done:
        return [Check(target, name, False, f"{outcome.status.value}: {outcome.reason}")]
    jobs_done = sum(job.status.is_completed for job in outcome.jobs)
    start_s = outcome.config.replica_start_s
    started = f"replica started in {start_s:.1f} s" if start_s is not None else "replica reused"
    completed = f"{jobs_done}/{len(outcome.jobs)} jobs completed; {started}"
    checks = [Check(target, name, jobs_done == len(outcome.jobs) > 0, completed)]
    checks.append(_policy_evidence(target, cell, outcome))
    if (pool := kv_pool_check(target, cell, outcome)) is not None:
        checks.append(pool)
    expected_unclean = get_policy(cell.policy).keeps_kv_across_reset
    if reset_error is None:
        checks.append(Check(target, f"reset {cell.policy}", True, f"proven clean: {reset}"))
    else:
        note = " (expected: its tier keeps its KV across vLLM's reset; sweeps give each such cell a fresh replica)"
        detail = reset_error + (note if expected_unclean else "")
        checks.append(Check(target, f"reset {cell.policy}", expected_unclean, detail))
    return checks


def _policy_evidence(target: str, cell: CellSpec, outcome: CellOutcome) -> Check:
    name = f"{cell.policy} did its job"
    if (found := get_policy(cell.policy).evidence(outcome)) is not None:
        return Check(target, name, found.ok, found.detail)
    later = [r for r in outcome.requests if r.turn and r.turn > 1 and r.best_cached_tokens]
    hit = sum(r.cached_tokens or 0 for r in later) / max(1, sum(r.best_cached_tokens for r in later))
    detail = f"turns 2+ hit {hit:.0%} of their best prefix-cache share"
    if preflight(cell).regime in (Regime.OFFLOAD_WINDOW, Regime.QUEUEING):
        # Where the pool overflows, evicting and recomputing prefixes is what the cell measures: the cache must work,
        # not hold everything.
        return Check(target, name, hit > 0, f"{detail} (the pool overflows here: what it evicted was recomputed)")
    return Check(target, name, hit > 0.5, detail)


def kv_pool_check(target: str, cell: CellSpec, outcome: CellOutcome) -> Check | None:
    """The KV blocks vLLM sized from GPU memory against the sizing library's prediction (None where the pool
    was fixed, or the GPU or model is unknown to the sizing). Informative: a difference says the sizing's
    overhead estimate is off for this stack, which makes preflight regimes less exact, not the cell wrong."""
    facts = outcome.config.engine_facts
    if target not in GPU_TYPES or cell.engine_options.num_kv_blocks is not None or not facts or not facts.num_kv_blocks:
        return None
    try:
        arch = load_model(cell.model)
    except ValueError:
        return None
    block = facts.block_size
    sizing = size(arch, target, GPU_TYPES[target].memory_gib, utilization=cell.engine_options.gpu_memory_utilization,
                  overhead_gib=VLLM_NON_KV_OVERHEAD_GIB, block_size=block)  # fmt: skip
    predicted = sizing.gpu_kv_tokens // block
    difference = facts.num_kv_blocks / predicted - 1 if predicted else float("inf")
    detail = f"vLLM sized {facts.num_kv_blocks:,} blocks of {block}; sizing predicts {predicted:,} ({difference:+.1%})"
    if abs(difference) <= SIZING_TOLERANCE:
        return Check(target, "KV pool vs sizing", True, detail)
    return Check(target, "KV pool vs sizing", None, f"{detail}: the sizing's {VLLM_NON_KV_OVERHEAD_GIB:g} GiB overhead "
                 "estimate is off on this stack, so preflight regimes are rougher here")  # fmt: skip


def format_table(checks: list[Check]) -> str:
    widths = [max(len(header), *(len(getattr(c, column)) for c in checks))
              for header, column in (("target", "target"), ("check", "name"))]  # fmt: skip
    verdict_width = max(len("result"), *(len(c.verdict) for c in checks))
    lines = [f"{'target':<{widths[0]}}  {'check':<{widths[1]}}  {'result':<{verdict_width}}  detail"]
    for c in checks:
        lines.append(f"{c.target:<{widths[0]}}  {c.name:<{widths[1]}}  {c.verdict:<{verdict_width}}  {c.detail}")
    return "\n".join(lines)
