"""Command line: a GPU's evidence in one command, its stages planned against a time budget, no Ray, no tracking.

    python -m orchestrator.cli.evidence --gpu H200 --out $OUT --budget-s 450           # on a GPU node
    python -m orchestrator.cli.evidence --gpu cpu --out results/evidence --budget-s 900  # the rehearsal here

Stages, in order, each timed:
1. doctor: the node's checks (tested stack, driver against CUDA, torch sees the GPU, vLLM and LMCache's compiled
   ops import);
2. one short cell per policy (by default fcfs and then policies, chosen greedily, that run every other registered
   mechanism: continuum, lmcache, native-offload, simple-offload, lmcache-disk) with the Llama-3.1-8B-shaped dummy model,
   each with its evidence (what the policy did, vLLM's KV pool against the sizing library, a proven-clean reset),
   the server's start split into its phases, and whether it ran eager or with CUDA graphs;
3. profile: the fcfs cell's step trace as the GPU's rates (``orchestrator.sim.gpu_profile``), with the
   simulator's step-time error before and after;
4. source study: its low-load cells (1 and 3 JPS, fcfs and continuum) beside its published and simulated JCTs;
5. pressure: the pressure plan (``evidence.pressure``): fcfs, lmcache, native-offload and continuum where the GPU's
   KV pool overflows and a CPU tier must serve, each cell's regime and the simulator's prediction printed before it
   runs, then each measured beside its prediction, and each policy's JCT against fcfs over the same jobs;
6. capacity: cells at given loads on the pressure plan's pool and tier (``--capacity-cells``), each judged against an
   SLO (``--slo``; ``records.slo``) as measured and as the simulator predicts it: a capacity search's answer
   (``sweeps/capacity.py``, run where the predictions are made) measured at itself and above.

With ``--predict-only FILE`` nothing runs: every GPU cell of those stages is simulated with an engine stack
(``--sim-stack``) and written to FILE, to commit before the run; the run given ``--predictions FILE`` ends with each
measured cell beside its prediction and band (``evidence.held_out``).

A stage starts only when its estimate fits in the budget left (``evidence.budget``), else it is skipped with the
reason. After every stage the evidence is packed into ``--out`` as three files (``evidence.pack``), so a run cut
at its limit still returns every stage that finished; SIGTERM ends the stage in flight as cut and packs. On
``--gpu cpu`` the CUDA-only policies do not run: their stage builds their server's command line for a GPU and
says so. Bad input fails before anything starts, with one line naming the value.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd
from pydantic import ValidationError

from orchestrator.capacity.plan import lowest_judgeable_jps
from orchestrator.evidence.checks import Check, checked_cell, format_table, node_checks, stack_check
from orchestrator.cli.parser import command_parser
from orchestrator.evidence.budget import DOCTOR_S, PROFILE_S, Budget
from orchestrator.evidence.held_out import (
    Prediction,
    check_predicts,
    held_out_stage,
    predictions_document,
    predictions_markdown,
    read_predictions,
)
from orchestrator.evidence.pack import PACKED_FILES, EvidenceHeader, StageResult, pack, stage_table, without_cell_lines
from orchestrator.evidence.pressure import (
    BASELINE,
    PRESSURE_POLICIES,
    CellFacts,
    PressurePoint,
    cell_facts,
    margins,
    pressure_cells,
    pressure_point,
    rehearsal_point,
    simulated,
    winner,
)
from orchestrator.evidence.pressure import WINDOW_S as PRESSURE_WINDOW_S
from orchestrator.gpus import CPU, GPU_TYPES, known_device_names
from orchestrator.mechanisms.tier import NodeNeed
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.models.served import Weights, served_model
from orchestrator.policies.catalog import POLICIES, get_policy, policies_covering_every_mechanism
from orchestrator.records.cell import CellOutcome, FailureKind, ReplicaStart
from orchestrator.records.layout import CellFiles
from orchestrator.records.slo import Slo
from orchestrator.records.summary import CellSummary, summarize
from orchestrator.replica.vllm_server import vllm_server_command
from orchestrator.roofline.hardware import Calibration, Device
from orchestrator.cli.cell import cell_from
from orchestrator.sim.calibrate import MeasuredCell, measured_cells, simulated_jct
from orchestrator.sim.gpu_profile import measure_profile, step_error, trace_steps
from orchestrator.sim.profile import CPU_STEP_BOUNDS, fit_step_costs
from orchestrator.sim.stacks import DEFAULT_STACK, stack_names
from orchestrator.sizing.kv import Regime
from orchestrator.sizing.models import load_model
from orchestrator.sweep.planning.cells import CellSpec
from orchestrator.sweep.planning.preflight import preflight
from orchestrator.sweep.planning.serving import served_cell
from orchestrator.sweep.planning.spec import RunLimits
from orchestrator.sweep.runtime.results import write_attempt_files
from orchestrator.sweep.runtime.worker import CellWorker
from orchestrator.validation import first_line, one_line

EVIDENCE_POLICIES = policies_covering_every_mechanism("gpu")
STAGES = ("doctor", "cells", "profile", "source-study", "pressure", "capacity")
CAPACITY_SLO = "jct_p90=30s"
SOURCE_STUDY = "fcfs:1,fcfs:3,continuum:1,continuum:3"  # its low-load cells, POLICY:JPS
PROFILED_POLICY = "fcfs"
MIN_PROFILE_STEPS = 20
BUILT_FOR_GPU = "H100"  # the GPU a CUDA-only policy's command line is built for in a CPU rehearsal
UNREAD_STACK = "(read by the doctor, or by the first cell)"


class Cut(BaseException):
    """SIGTERM arrived: the command's time limit is ending it. Not an ``Exception``, so that no handler on the
    way (a reset proof's, a stage's) takes it for a failure of its own."""


def parser() -> argparse.ArgumentParser:
    p = command_parser("evidence", __doc__)
    p.add_argument("--gpu", required=True, help=f"this machine's GPU type, or cpu to rehearse on the CPU engine: "
                   f"{', '.join(known_device_names())}")  # fmt: skip
    p.add_argument("--out", type=Path, required=True, help="where the packed evidence goes (three files)")
    p.add_argument("--budget-s", type=float, required=True, help="seconds the whole run may take")
    p.add_argument("--work", type=Path, help="where each stage's files are written (default: a new temporary folder)")
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, in this order: {', '.join(STAGES)}")
    p.add_argument("--policies", default=",".join(EVIDENCE_POLICIES), help="the policies of the cells stage")
    p.add_argument("--model", help="default: the Llama-3.1-8B shape on a GPU, the tiny model on cpu")
    p.add_argument("--weights", choices=[weights.value for weights in Weights],
                   help="default: dummy on a GPU (no download), real on cpu (the tiny model's generated weights)")
    p.add_argument("--jps", type=float, default=1.0, help="the cells stage's load")
    p.add_argument("--duration-s", type=float, help="the cells stage's arrival window; default: 10 on a GPU, 3 on cpu")
    p.add_argument("--source-cells", default=SOURCE_STUDY, help="the source-study cells, comma-separated POLICY:JPS")
    p.add_argument("--source-duration-s", type=float,
                   help="the source-study cells' arrival window; default: the study's 45 s on a GPU, 5 on cpu")
    p.add_argument("--dram-gb", type=float, default=8.0, help="the CPU tier of lmcache and native-offload (GiB)")
    p.add_argument("--first-start-s", type=float, help="the first server start's estimate before one is measured "
                   "(default: the type's measured first start, orchestrator/data/starts.toml); a previous call's "
                   "measured start is a closer one")
    p.add_argument("--kv-blocks", help="fix the KV pool in blocks, or auto (kvsweep cell's default per device)")
    p.add_argument("--pressure-policies", default=",".join(PRESSURE_POLICIES), help="the pressure stage's policies, "
                   "in the order they run (the first is the baseline every other is compared with)")
    p.add_argument("--capacity-cells", default="", help="the capacity stage's cells, comma-separated POLICY:JPS, on "
                   "the pressure plan's pool and tier (its window: --pressure-window-s)")
    p.add_argument("--slo", default=CAPACITY_SLO, help=f"what the capacity stage judges each cell against; default: "
                   f"{CAPACITY_SLO}")
    p.add_argument("--pressure-window-s", type=float, help=f"the pressure cells' arrival window; default: "
                   f"{PRESSURE_WINDOW_S:g} on a GPU (the load and pool are the sizing's), the cells stage's on cpu "
                   "(and its load, pool and tier, so that its replica serves both)")  # fmt: skip
    p.add_argument("--sim-stack", default=DEFAULT_STACK, choices=stack_names(), help="the engine stack the simulator "
                   f"predicts each cell with (sim/stacks.py); default: {DEFAULT_STACK}")  # fmt: skip
    predicted = p.add_mutually_exclusive_group()
    predicted.add_argument("--predict-only", type=Path, metavar="FILE", help="run nothing: simulate every GPU cell the "
                           "same command runs and write the predictions to FILE (JSON, a Markdown page beside it), to "
                           "commit before the run")  # fmt: skip
    predicted.add_argument("--predictions", type=Path, metavar="FILE", help="the file --predict-only wrote for this "
                           "command: the run ends with each measured cell beside its prediction")  # fmt: skip
    return p


@dataclass(frozen=True)
class Plan:
    """The run the flags ask for, checked before anything starts."""

    target: str
    stages: tuple[str, ...]
    cells: tuple[PolicyCell, ...]
    source_study: tuple[CellSpec, ...]
    pressure_point: PressurePoint | None = None  # None when neither the pressure nor the capacity stage is asked for
    pressure: tuple[PolicyCell, ...] = ()
    capacity: tuple[CellSpec, ...] = ()
    slo: Slo | None = None
    sim_stack: str = DEFAULT_STACK  # what the simulator predicts each cell with

    def gpu_cells(self) -> list[tuple[str, CellSpec]]:
        """Every cell the run measures on a GPU type, named by its folder in the evidence (``<stage>/<cell>``)."""
        staged = [*(("cells", entry.cell) for entry in self.cells if "cells" in self.stages),
                  *(("source-study", cell) for cell in self.source_study if "source-study" in self.stages),
                  *(("pressure", entry.cell) for entry in self.pressure),
                  *(("capacity", cell) for cell in self.capacity)]  # fmt: skip
        return [(cell_folder(stage, cell), cell) for stage, cell in staged if cell is not None and cell.gpu in GPU_TYPES]


def cell_folder(stage: str, cell: CellSpec) -> str:
    """A cell's folder in the evidence, ``<stage>/<cell>``: by policy in the stages that run a policy once, by policy
    and load in those that may run it at several."""
    return f"{stage}/{cell.policy}" if stage in ("cells", "pressure") else f"{stage}/{cell.policy}-{cell.jps:g}jps"


@dataclass(frozen=True)
class PolicyCell:
    """A policy of the cells stage: its cell, or, for a CUDA-only policy on cpu, the server command it would run
    on a GPU (built, never started)."""

    policy: str
    cell: CellSpec | None
    gpu_command: str | None = None


def plan_from(args: argparse.Namespace) -> Plan:
    """Raises ``ValueError`` or pydantic's ``ValidationError`` with what is wrong in the flags."""
    if args.gpu not in known_device_names():
        raise ValueError(f"unknown --gpu {args.gpu!r}; valid: {', '.join(known_device_names())}")
    if args.budget_s <= 0:
        raise ValueError(f"--budget-s {args.budget_s:g} is not positive; valid: the seconds the run may take")
    if args.first_start_s is not None and args.first_start_s <= 0:
        raise ValueError(f"--first-start-s {args.first_start_s:g} is not positive; valid: a start's seconds")
    stages = _names(args.stages, STAGES, "--stages")
    policies = _names(args.policies, tuple(POLICIES), "--policies")
    on_cpu = args.gpu == CPU
    duration = args.duration_s if args.duration_s is not None else (3.0 if on_cpu else 10.0)
    source_duration = args.source_duration_s if args.source_duration_s is not None else (5.0 if on_cpu else 45.0)
    weights = args.weights or (Weights.REAL.value if on_cpu else Weights.DUMMY.value)
    base = dict(gpu=args.gpu, model=args.model, weights=weights, dram_gb=0.0, scale=None, seed=42,
                request_timeout_s=300.0, job_timeout_s=600.0, kv_blocks=args.kv_blocks, block_size=None,
                gpu_memory_utilization=0.85, max_num_seqs=None)  # fmt: skip
    cells = []
    for policy in policies:
        dram_gb = get_policy(policy).dram_gb_taken(args.dram_gb)
        flags = argparse.Namespace(**{**base, "policy": policy, "jps": args.jps, "duration_s": duration, "dram_gb": dram_gb})
        if on_cpu and not get_policy(policy).runs_on(CPU):
            gpu_flags = {"gpu": BUILT_FOR_GPU, "model": None, "weights": Weights.DUMMY.value, "kv_blocks": None}
            cells.append(PolicyCell(policy, None, _server_command(cell_from(argparse.Namespace(**{**vars(flags),
                                                                                                  **gpu_flags})))))
        else:
            cells.append(PolicyCell(policy, cell_from(flags)))
    source = tuple(cell_from(argparse.Namespace(**{**base, "policy": policy, "jps": jps, "duration_s": source_duration}))
                   for policy, jps in _policy_loads(args.source_cells, "--source-cells"))  # fmt: skip
    point, pressure, capacity, slo = None, (), (), None
    if "pressure" in stages or "capacity" in stages:
        if (policies := _names(args.pressure_policies, tuple(POLICIES), "--pressure-policies"))[0] != BASELINE:
            raise ValueError(f"--pressure-policies {args.pressure_policies!r}: the first is the baseline; valid: "
                             f"{BASELINE} first, e.g. {','.join(PRESSURE_POLICIES)}")  # fmt: skip
        if on_cpu:
            cells_pool = cell_from(argparse.Namespace(**{**base, "policy": BASELINE, "jps": args.jps,
                                                         "duration_s": duration}))  # fmt: skip
            options, model = cells_pool.engine_options, cells_pool.model
            point = rehearsal_point(args.jps, args.pressure_window_s or duration, options.num_kv_blocks,
                                    options.block_size_on(CPU), args.dram_gb)  # fmt: skip
        else:
            model = args.model or LLAMA_8B
            point = pressure_point(args.gpu, model, args.pressure_window_s or PRESSURE_WINDOW_S)
        scale = cells_pool.workload.scale if on_cpu else 1.0
        if "pressure" in stages:
            pressure = _pressure_entries(pressure_cells(point, policies, model, Weights(weights), scale), on_cpu)
        if "capacity" in stages:
            slo = Slo.parse(args.slo)
            loads = _policy_loads(args.capacity_cells, "--capacity-cells")
            if on_cpu and (cuda := [policy for policy, _ in loads if not get_policy(policy).runs_on(CPU)]):
                raise ValueError(f"--capacity-cells: {', '.join(dict.fromkeys(cuda))} need(s) a CUDA GPU; on cpu "
                                 "valid: policies without a CUDA-only connector, e.g. fcfs, continuum")  # fmt: skip
            _check_judgeable(loads, point.window_s, slo, args.capacity_cells)
            capacity = tuple(cell.model_copy(update={"workload": cell.workload.model_copy(update={"jps": jps})})
                             for policy, jps in loads for cell in pressure_cells(point, [policy], model, Weights(weights), scale))  # fmt: skip
    return Plan(args.gpu, stages, tuple(cells), source, point, pressure, capacity, slo, args.sim_stack)


def _check_judgeable(loads: list[tuple[str, float]], window_s: float, slo: Slo, text: str) -> None:
    """Raises ``ValueError`` (one line) where a capacity cell's window expects too few jobs to bound the SLO's
    percentiles (``capacity.plan.lowest_judgeable_jps``): such a cell can never be met, and its GPU time buys no
    verdict."""
    lowest = lowest_judgeable_jps(slo, window_s, 1)
    short = [(policy, jps) for policy, jps in loads if lowest is not None and jps < lowest]
    if short:
        policy, jps = min(short, key=lambda load: load[1])
        raise ValueError(f"--capacity-cells {text!r}: {policy}:{jps:g} over a {window_s:g} s window expects about "
                         f"{jps * window_s:.0f} jobs, too few to bound {slo}'s percentiles; valid: loads from "
                         f"{lowest:.3g} JPS, or --pressure-window-s {math.ceil(lowest * window_s / jps)} or more")  # fmt: skip


def _pressure_entries(cells: tuple[CellSpec, ...], on_cpu: bool) -> tuple[PolicyCell, ...]:
    """The pressure cells; on cpu, each CUDA-only policy's as the server command the same cell runs on an H100."""
    cuda_only = [cell.policy for cell in cells if on_cpu and not get_policy(cell.policy).runs_on(CPU)]
    on_gpu = pressure_cells(pressure_point(BUILT_FOR_GPU, LLAMA_8B), cuda_only, LLAMA_8B, Weights.DUMMY)
    commands = {cell.policy: _server_command(cell) for cell in on_gpu}
    return tuple(PolicyCell(cell.policy, None, commands[cell.policy]) if cell.policy in commands
                 else PolicyCell(cell.policy, cell) for cell in cells)  # fmt: skip


def _policy_loads(text: str, flag: str) -> list[tuple[str, float]]:
    cells = []
    for item in (item.strip() for item in text.split(",") if item.strip()):
        policy, _, jps = item.partition(":")
        if policy not in POLICIES:
            raise ValueError(f"{flag} {item!r}: unknown policy {policy!r}; valid: {', '.join(POLICIES)}")
        try:
            cells.append((policy, float(jps)))
        except ValueError:
            raise ValueError(f"{flag} {item!r}: {jps!r} is not a JPS; valid: POLICY:JPS, e.g. {SOURCE_STUDY}") from None
        if not cells[-1][1] > 0:
            raise ValueError(f"{flag} {item!r}: a load must be positive; valid: POLICY:JPS, e.g. {SOURCE_STUDY}")
    return cells


def _names(text: str, valid: tuple[str, ...], flag: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in valid]
    if unknown or not names:
        raise ValueError(f"{flag} {text!r}: unknown {', '.join(unknown) or 'empty list'}; valid: {', '.join(valid)}")
    return names


class EvidenceRun:
    """The stages of one run, each timed and recorded, the evidence packed after each."""

    def __init__(self, plan: Plan, budget: Budget, work: Path, out: Path, command: str,
                 predictions: Sequence[Prediction] = ()):  # fmt: skip
        self.plan, self.budget, self.work, self.out = plan, budget, work, out
        self.predictions = predictions
        self.measured_jct_s: dict[str, float | None] = {}  # by the cell's folder in the evidence, for the predictions
        self.stages: list[StageResult] = []
        self.worker = CellWorker()
        self.on_gpu = plan.target != CPU
        # Set when a compiled start failed on the GPU: every later cell runs eager, and says so.
        self.eager_because: str | None = None
        self.header = EvidenceHeader(command, plan.target, _device_name(self.on_gpu), UNREAD_STACK,
                                     budget.total_s)  # fmt: skip

    def run(self) -> list[StageResult]:
        try:
            for name in self.plan.stages:
                getattr(self, "_" + name.replace("-", "_"))()
            if self.predictions:
                self._record(held_out_stage(self.predictions, self.measured_jct_s))
        finally:
            self.worker.shutdown()
        return self.stages

    # -- one stage -------------------------------------------------------------------------------------------

    def stage(self, name: str, estimate_s: float, body: Callable[[], StageResult]) -> StageResult:
        """Run ``body`` if ``estimate_s`` fits in the budget, record its result (or why it was skipped, failed
        or cut), print it and pack."""
        if (refusal := self.budget.refusal(estimate_s)) is not None:
            return self._record(StageResult(name, "skipped", 0.0, refusal))
        print(f"[{self.budget.total_s - self.budget.left_s():6.0f} s] {name} ...", flush=True)
        started = time.monotonic()
        try:
            result = body()
        except Cut:
            result = StageResult(name, "cut", 0.0, "SIGTERM: the command's time limit ended the run inside this stage")
            self._record(_timed(result, started))
            raise
        except Exception as error:  # a stage's failure is evidence too; the next stage may still run
            result = StageResult(name, "failed", 0.0, f"{type(error).__name__}: {first_line(error)}")
        return self._record(_timed(result, started))

    def _record(self, result: StageResult) -> StageResult:
        self.stages.append(result)
        print(f"  {result.name}: {result.status} in {result.seconds:.1f} s: {result.detail}", flush=True)
        if result.table:
            print("    " + result.table.replace("\n", "\n    "), flush=True)
        pack(self.work, self.out, self.header, self.stages)
        return result

    # -- the stages ------------------------------------------------------------------------------------------

    def _doctor(self) -> None:
        def body() -> StageResult:
            cells = [entry.cell for entry in self.plan.cells if entry.cell is not None]
            cell = (cells or list(self.plan.source_study))[0]
            needs_lmcache = any(NodeNeed.LMCACHE in get_policy(cell.policy).needs for cell in cells)
            checks = node_checks(self.plan.target, cell.model, cell.weights, needs_lmcache)
            # The stack check's detail names what the node has, as the doctor read it: no second probe.
            stack = next(check.detail for check in checks if check.name == "serving stack")
            self.header = replace(self.header, stack=stack)
            return _from_checks("doctor", checks, "the node's checks", self.work / "doctor")

        self.stage("doctor", DOCTOR_S, body)

    def _cells(self) -> None:
        for entry in self.plan.cells:
            name = f"cell {entry.policy}"
            if entry.cell is None:
                self._record_built(name, entry)
                continue
            self.stage(name, self.budget.cell_estimate_s(entry.cell.workload, needs_start=True),
                       lambda cell=entry.cell: self._policy_cell(cell))  # fmt: skip

    def _record_built(self, name: str, entry: PolicyCell) -> None:
        """A CUDA-only policy's cell on cpu: not run, the server command it runs on a GPU built and kept."""
        why = f"needs CUDA, not run on cpu; its {BUILT_FOR_GPU} server command built"
        self._record(StageResult(name, "skipped", 0.0, why, entry.gpu_command or "",
                                 {"server_command": entry.gpu_command}))  # fmt: skip

    def _policy_cell(self, cell: CellSpec) -> StageResult:
        return self._checked_stage(f"cell {cell.policy}", cell, self.work / cell_folder("cells", cell))[0]

    def _checked_stage(self, name: str, cell: CellSpec, directory: Path) -> tuple[StageResult, CellOutcome]:
        """``cell`` run with its evidence (``checks.checked_cell``), its files in ``directory``, its server's start
        split where it started one; eager from then on if a compiled start failed."""
        ran = self._settled(cell)
        outcome, checks = self._checked(ran)
        if self.on_gpu and self.eager_because is None and _start_failed(outcome):
            # One failed compiled start (torch.compile or CUDA-graph capture) must not cost every cell after it.
            self.eager_because = f"the {cell.policy} cell's compiled start failed: {_why_not_done(outcome)}"
            self._save_cell(directory.with_name(f"{directory.name}-compiled"), outcome)
            ran = self._settled(cell)
            outcome, checks = self._checked(ran)
        summary = self._save_cell(directory, outcome)
        if self.header.stack == UNREAD_STACK and outcome.config.stack is not None:  # no doctor ran: the cell read it
            needs_lmcache = NodeNeed.LMCACHE in get_policy(cell.policy).needs
            self.header = replace(self.header, stack=stack_check(self.plan.target, outcome.config.stack,
                                                                 needs_lmcache).detail)
        eager = ran.engine_setup.enforce_eager
        settings = "eager" if eager else "torch.compile and CUDA graphs"
        if ran.engine_options.max_num_seqs is not None:
            settings += f", max_num_seqs {ran.engine_options.max_num_seqs}"
        facts: dict = {"policy": cell.policy, "settings": settings, "checks": [asdict(check) for check in checks],
                       "jct_mean_s": summary.jct_mean_s if summary else None}  # fmt: skip
        table = format_table(checks)
        if (start_s := outcome.config.replica_start_s) is not None:
            self.budget.record_start(start_s)
        if (start := outcome.config.replica_start) is not None:
            facts["start"] = start.phases | {"forked": start.forked, "compile cache": start.compile_cache}
            table += "\nstart: " + ", ".join(f"{phase} {_seconds(value)}" for phase, value in start.phases.items())
            table += f"; {_start_kind(start)}"
        table += f"\nsettings: {settings}" + (f" ({self.eager_because})" if self.eager_because else "")
        failed = [check for check in checks if check.ok is False]
        status = "failed" if failed or summary is None else "done"
        if summary is None:
            detail = _why_not_done(outcome)
        else:
            detail = f"{failed[0].name}: {failed[0].detail}" if failed else _cell_line(outcome, summary)
        return StageResult(name, status, 0.0, detail, table, facts), outcome

    def _save_cell(self, directory: Path, outcome: CellOutcome, slo: Slo | None = None) -> CellSummary | None:
        """The cell's files as a sweep keeps them (its summary judged against ``slo`` where there is one), and its
        replica's log (the start is at its top) less the cell's own lines, which are its server.log: LMCache logs
        every store, so a whole second copy doubles the archive."""
        summary = (summarize(outcome.requests, outcome.jobs, outcome.scheduler_trace, slo, outcome.config.cell.jps)
                   if outcome.status.is_done else None)  # fmt: skip
        write_attempt_files(CellFiles(directory), outcome, summary, row=None)
        self.measured_jct_s[f"{directory.parent.name}/{directory.name}"] = summary.jct_mean_s if summary else None
        (directory / "replica.log").write_text(without_cell_lines(self.worker.replica_log(), outcome.server_log))
        return summary

    def _checked(self, cell: CellSpec) -> tuple[CellOutcome, list[Check]]:
        """``cell`` run, its replica's reset proven after it, and the evidence both give."""
        limits = self._limits()
        return checked_cell(cell.gpu, cell, lambda cell: self.worker.run(cell, limits), self.worker.prove_reset)

    def _limits(self) -> RunLimits:
        """A cell's limits: its server may take what is left of the budget to start; one attempt, driven from here."""
        return RunLimits(health_timeout_s=max(60.0, self.budget.left_s()), client_actors=0, max_attempts=1)

    def _settled(self, cell: CellSpec) -> CellSpec:
        """``cell`` eager once a compiled start has failed, as it is otherwise."""
        if self.eager_because is None:
            return cell
        return cell.model_copy(update={"engine_options": cell.engine_options.model_copy(update={"enforce_eager": True})})

    def _profile(self) -> None:
        trace = CellFiles(self.work / "cells" / PROFILED_POLICY).scheduler_trace
        if not trace.is_file():
            self._record(StageResult("profile", "skipped", 0.0, f"no {PROFILED_POLICY} cell trace to profile"))
            return
        self.stage("profile", PROFILE_S, lambda: self._profile_trace(trace))

    def _profile_trace(self, trace: Path) -> StageResult:
        cell = next(entry.cell for entry in self.plan.cells if entry.policy == PROFILED_POLICY)
        arch = load_model(served_model(cell.model, cell.weights).directory)
        steps = trace_steps(trace)
        if len(steps) < MIN_PROFILE_STEPS:
            return StageResult("profile", "failed", 0.0, f"{len(steps)} busy steps; a profile needs {MIN_PROFILE_STEPS}")
        if self.on_gpu and self.plan.target in GPU_TYPES:
            measured = measure_profile(self.plan.target, steps, arch, PROFILED_POLICY)
            facts = {**asdict(measured.profile), "error_before": measured.error_before, "error_after": measured.error_after}
            detail = (f"{len(steps)} steps: step-time error {measured.error_before:.1%} before, "
                      f"{measured.error_after:.1%} after")  # fmt: skip
            return StageResult("profile", "done", 0.0, detail, measured.describe(), facts)
        error, table = _cpu_roofline(steps, arch)
        detail = f"{len(steps)} steps: the fitted roofline's median step-time error {error:.1%} (cpu has no rates to replace)"
        return StageResult("profile", "done", 0.0, detail, table, {"error_after": error})

    def _source_study(self) -> None:
        self._cell_stages("source", self.plan.source_study, self._source_cell)

    def _cell_stages(self, stage: str, cells: tuple[CellSpec, ...],
                     body: Callable[[CellSpec, str], StageResult]) -> None:  # fmt: skip
        """A stage per cell, named by ``stage``, its policy and load, each estimated with its start where its replica
        is not the one kept."""
        for cell in cells:
            needs_start = not self.worker.keeps_replica_for(self._settled(cell))
            name = f"{stage} {cell.policy} {cell.jps:g} JPS"
            self.stage(name, self.budget.cell_estimate_s(cell.workload, needs_start),
                       lambda cell=cell, name=name: body(cell, name))  # fmt: skip

    def _measured(self, cell: CellSpec, directory: Path,
                  slo: Slo | None = None) -> tuple[CellOutcome, CellSummary | None]:  # fmt: skip
        """``cell`` run on the kept or a new replica (its start recorded for the budget) and saved in ``directory``."""
        outcome = self.worker.run(self._settled(cell), self._limits())
        if (start_s := outcome.config.replica_start_s) is not None:
            self.budget.record_start(start_s)
        return outcome, self._save_cell(directory, outcome, slo)

    def _source_cell(self, cell: CellSpec, name: str) -> StageResult:
        outcome, summary = self._measured(cell, self.work / cell_folder("source-study", cell))
        if summary is None or summary.jct_mean_s is None:
            return StageResult(name, "failed", 0.0, _why_not_done(outcome))
        published = _published_jct(cell)
        simulated = (simulated_jct(MeasuredCell("large_dram", cell.gpu, cell.policy, cell.jps, 0.0, 0.0),
                                   Calibration.load()) if cell.gpu in GPU_TYPES else None)  # fmt: skip
        facts = {"jct_mean_s": summary.jct_mean_s, "published_jct_s": published, "simulated_jct_s": simulated,
                 "completed": summary.num_completed, "jobs": summary.num_jobs}  # fmt: skip
        detail = (f"mean JCT {summary.jct_mean_s:.2f} s ({summary.num_completed}/{summary.num_jobs} jobs); published "
                  f"{_seconds(published)}, simulated {_seconds(simulated)}")  # fmt: skip
        return StageResult(name, "done", 0.0, detail, facts=facts)

    def _pressure(self) -> None:
        """The plan printed first (each cell's regime and prediction), then each cell measured beside its prediction,
        then every policy's JCT against the baseline's over the same jobs."""
        point = self.plan.pressure_point
        predicted = {entry.policy: prediction for entry in self.plan.pressure
                     if entry.cell and (prediction := self._predicted(entry.cell)) is not None}  # fmt: skip
        plan_facts = {"point": asdict(point), "predicted": {p: f.as_dict() for p, f in predicted.items()}}
        table = _plan_table(self.plan.pressure, predicted)
        self._record(StageResult("pressure plan", "done", 0.0, point.describe(), table, plan_facts))
        measured: dict[str, tuple[CellFacts, CellOutcome]] = {}
        for entry in self.plan.pressure:
            name = f"pressure {entry.policy}"
            if entry.cell is None:
                self._record_built(name, entry)
                continue
            needs_start = not self.worker.keeps_replica_for(self._settled(entry.cell))
            prediction = predicted.get(entry.policy)
            span_s = prediction.span_s if prediction is not None else None
            estimate = self.budget.cell_estimate_s(entry.cell.workload, needs_start, span_s)
            self.stage(name, estimate, lambda cell=entry.cell: self._pressure_cell(cell, prediction, measured))
        if BASELINE in measured and len(measured) > 1:  # a policy to hold against the baseline
            self._record(_verdict_stage(measured, predicted))

    def _capacity(self) -> None:
        """Each cell judged against the SLO, measured beside the simulator's judgement of the same cell."""
        self._cell_stages("capacity", self.plan.capacity, self._capacity_cell)

    def _capacity_cell(self, cell: CellSpec, name: str) -> StageResult:
        slo = self.plan.slo
        outcome, measured = self._measured(cell, self.work / cell_folder("capacity", cell), slo)
        if measured is None:
            return StageResult(name, "failed", 0.0, _why_not_done(outcome))
        twin = self._twin(cell)
        predicted = summarize(twin.requests, twin.jobs, twin.scheduler_trace, slo, cell.jps) if twin else None
        facts = {"policy": cell.policy, "jps": cell.jps, "slo": str(slo), "measured": _slo_facts(measured),
                 "predicted": _slo_facts(predicted) if predicted else None,
                 "replica_start_s": outcome.config.replica_start_s}  # fmt: skip
        detail = f"{slo}: measured {_slo_line(measured)}" + (f"; predicted {_slo_line(predicted)}" if predicted else "")
        return StageResult(name, "done", 0.0, detail, facts=facts)

    def _twin(self, cell: CellSpec) -> CellOutcome | None:
        """``cell`` in the simulator (None where it has no roofline: cpu)."""
        return self.worker.run(simulated(cell, self.plan.sim_stack), RunLimits()) if cell.gpu in GPU_TYPES else None

    def _predicted(self, cell: CellSpec) -> CellFacts | None:
        """The simulator's prediction of ``cell`` (None where it has no roofline: cpu)."""
        return predicted_facts(self.worker, cell, self.plan.sim_stack) if cell.gpu in GPU_TYPES else None

    def _pressure_cell(self, cell: CellSpec, prediction: CellFacts | None,
                       measured: dict[str, tuple[CellFacts, CellOutcome]]) -> StageResult:  # fmt: skip
        result, outcome = self._checked_stage(f"pressure {cell.policy}", cell, self.work / cell_folder("pressure", cell))
        regime = preflight(cell).regime
        pressure_cell = regime is Regime.OFFLOAD_WINDOW  # only the offload window's cells are called pressure cells
        called = ("a pressure cell" if pressure_cell else
                  f"not a pressure cell: {regime.value if regime else 'the sizing has no estimate here'}")  # fmt: skip
        facts = dict(result.facts, regime=regime.value if regime else None, pressure_cell=pressure_cell,
                     predicted=prediction.as_dict() if prediction else None)
        if not outcome.status.is_done:
            return replace(result, facts=facts)
        found = cell_facts(cell, outcome)
        measured[cell.policy] = (found, outcome)
        facts["measured"] = found.as_dict()
        table = result.table + "\n" + _facts_line("measured", found) + (
            "\n" + _facts_line("predicted", prediction) if prediction else "")  # fmt: skip
        return replace(result, detail=f"{result.detail}; {called}", table=table, facts=facts)


# -- helpers ---------------------------------------------------------------------------------------------------


def _slo_facts(summary: CellSummary) -> dict:
    return {"slo_met": summary.slo_met, "jct_p90_s": summary.jct_p90_s, "jct_mean_s": summary.jct_mean_s,
            "good_pct": summary.good_pct, "good_lo_pct": summary.good_lo_pct, "good_hi_pct": summary.good_hi_pct,
            "num_completed": summary.num_completed, "num_jobs": summary.num_jobs}  # fmt: skip


def _slo_line(summary: CellSummary) -> str:
    return (f"{summary.slo_met} (p90 JCT {_seconds(summary.jct_p90_s)}, {summary.good_pct:.0f}% of "
            f"{summary.num_jobs} jobs good)")  # fmt: skip


def _plan_table(entries: tuple[PolicyCell, ...], predicted: dict[str, CellFacts]) -> str:
    """Each pressure cell's regime by the sizing's estimate and the simulator's prediction, before anything runs."""
    lines = []
    for entry in entries:
        if entry.cell is None:
            lines.append(f"{entry.policy}: needs CUDA (its server command is built)")
            continue
        regime = preflight(entry.cell).regime
        line = f"{entry.policy}: regime {regime.value if regime else 'no estimate (cpu)'}"
        if (prediction := predicted.get(entry.policy)) is not None:
            line += "; " + _facts_line("predicted", prediction)
        lines.append(line)
    return "\n".join(lines)


def _facts_line(label: str, facts: CellFacts) -> str:
    text = (f"{label}: {facts.completed}/{facts.jobs} jobs, mean JCT {_seconds(facts.jct_mean_s)}, p90 "
            f"{_seconds(facts.jct_p90_s)}, TTFT p50 {_seconds(facts.ttft_p50_s)}, span {_seconds(facts.span_s)}, GPU "
            f"prefix {facts.gpu_hit_share or 0:.0%} of {facts.prompt_tokens:,.0f} prompt tokens")  # fmt: skip
    if facts.tier_hit_tokens is not None:
        share = f" ({facts.tier_served_share:.0%})" if facts.tier_served_share is not None else ""
        looked_up = f" of {facts.tier_looked_up_tokens:,.0f} looked up" if facts.tier_looked_up_tokens else ""
        text += (f", CPU tier stored {facts.tier_stored_tokens or 0:,.0f} tokens ({facts.tier_stored_from}) and served "
                 f"{facts.tier_hit_tokens:,.0f}{looked_up}{share}")  # fmt: skip
    if facts.preemptions is not None:
        text += f", {facts.preemptions} preemptions"
    return text


def _verdict_stage(measured: dict[str, tuple[CellFacts, CellOutcome]], predicted: dict[str, CellFacts]) -> StageResult:
    """Every policy's mean JCT against the baseline's over the same jobs, measured (a paired bootstrap interval)
    beside the simulator's margin, and which policy won in each."""
    found = margins({policy: outcome for policy, (_, outcome) in measured.items()}, predicted)
    lines, facts = [], {}
    for margin in found:
        interval = margin.measured
        facts[margin.policy] = {"margin_pct": interval.estimate, "margin_lo_pct": interval.lo,
                                "margin_hi_pct": interval.hi, "predicted_margin_pct": margin.predicted_pct}  # fmt: skip
        beside = f"; simulated {margin.predicted_pct:+.1f}%" if margin.predicted_pct is not None else ""
        lower = f"{interval.estimate:+.1f}% [{interval.lo:+.1f}, {interval.hi:+.1f}]"
        lines.append(f"{margin.policy} vs {BASELINE}: {lower} lower mean JCT{beside}")
    winners = {"measured": winner({policy: f for policy, (f, _) in measured.items()}),
               "predicted": winner({policy: f for policy, f in predicted.items() if policy in measured})}  # fmt: skip
    facts["winner"] = winners
    lines.append(f"winner: measured {winners['measured']}, predicted {winners['predicted'] or '-'}")
    detail = f"{len(found)} policies against {BASELINE}; winner {winners['measured']}" + (
        f" (predicted {winners['predicted']})" if winners["predicted"] else "")  # fmt: skip
    return StageResult("pressure verdict", "done", 0.0, detail, "\n".join(lines), facts)


def _timed(result: StageResult, started: float) -> StageResult:
    return replace(result, seconds=time.monotonic() - started)


def _from_checks(name: str, checks: list[Check], what: str, directory: Path) -> StageResult:
    directory.mkdir(parents=True, exist_ok=True)
    table = format_table(checks)
    (directory / "checks.txt").write_text(table + "\n")
    failed = [check for check in checks if check.ok is False]
    detail = f"{failed[0].name}: {failed[0].detail}" if failed else f"{len(checks)} checks: {what} hold"
    return StageResult(name, "failed" if failed else "done", 0.0, detail, table,
                       {"checks": [asdict(check) for check in checks]})  # fmt: skip


def _start_failed(outcome: CellOutcome) -> bool:
    return outcome.failure_kind is FailureKind.REPLICA_START


def _why_not_done(outcome: CellOutcome) -> str:
    """The cell's reason and the last line of its server's log (a failed start's exception, most often)."""
    last = next((line.strip() for line in reversed(outcome.server_log.splitlines()) if line.strip()), "")
    return f"{outcome.status.value}: {outcome.reason}" + (f"; server log ends: {last[:300]}" if last else "")


def _cell_line(outcome: CellOutcome, summary: CellSummary) -> str:
    facts = outcome.config.engine_facts
    pool = f"KV pool {facts.num_kv_blocks} blocks x {facts.block_size} on {facts.device_name}" if facts else "no pool"
    return f"{summary.num_completed}/{summary.num_jobs} jobs, mean JCT {summary.jct_mean_s:.2f} s; {pool}"


def _server_command(cell: CellSpec) -> str:
    """The server command line ``cell`` would run (built, never started)."""
    engine = served_cell(cell, served_model(cell.model, cell.weights)).engine
    return shlex.join(vllm_server_command(engine, port=8000).argv)


def _cpu_roofline(steps: pd.DataFrame, arch) -> tuple[float, str]:
    """The CPU engine's fitted roofline (``sim.profile``, within a CPU's physical range) and its median relative
    step-time error; the table says which constants the steps did not determine."""
    costs = fit_step_costs(steps, arch, CPU_STEP_BOUNDS)
    flops, bandwidth, step_s, seq_s = costs
    device = Device(CPU, flops, bandwidth, bandwidth, 2048, 128)
    error = step_error(steps, arch, device, Calibration(1.0, 1.0, step_overhead_s=step_s, seq_overhead_s=seq_s))
    table = (f"  {flops / 1e9:.3g} GFLOP/s, {bandwidth / 1e9:.3g} GB/s, {step_s * 1e3:.3g} ms per step, "
             f"{seq_s * 1e3:.3g} ms per request; median step-time error {error:.1%}")  # fmt: skip
    return error, "\n".join([table, *(f"  {note}" for note in CPU_STEP_BOUNDS.notes(costs))])


def _published_jct(cell: CellSpec) -> float | None:
    for measured in measured_cells():
        if (measured.source, measured.gpu, measured.policy, measured.jps) == ("large_dram", cell.gpu, cell.policy,
                                                                              cell.jps):  # fmt: skip
            return measured.avg_jct_s
    return None


def _start_kind(start: ReplicaStart) -> str:
    """How a replica started, in words: forked from the node's launcher or not (and why), and torch.compile's cache."""
    if start.forked:
        kind = "forked from the node's launcher"
    else:
        kind = f"started plainly ({start.plain_because})" if start.plain_because else "started plainly"
    return f"{kind}; torch.compile cache {start.compile_cache or 'unused'}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _device_name(on_gpu: bool) -> str:
    if not on_gpu:
        return f"this machine's CPU ({os.cpu_count()} cores)"
    try:
        query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip() or "no GPU answered"
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"nvidia-smi failed: {first_line(error)}"


def _on_sigterm(signum, frame) -> None:
    raise Cut()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        plan = plan_from(args)
    except (ValueError, ValidationError) as error:
        print(f"error: {one_line(error) if isinstance(error, ValidationError) else error}", file=sys.stderr)
        return 2
    command = shlex.join(["python", "-m", "orchestrator.cli.evidence", *(argv if argv is not None else sys.argv[1:])])
    if args.predict_only is not None:
        return _predict_only(plan, args.predict_only, command)
    try:
        predictions = read_predictions(args.predictions) if args.predictions else []
        if args.predictions:
            check_predicts(predictions, plan.gpu_cells(), args.predictions)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="kvsweep-evidence-"))
    work.mkdir(parents=True, exist_ok=True)
    budget = Budget(args.budget_s, plan.target, args.first_start_s)
    print(f"evidence for {plan.target} in at most {args.budget_s:.0f} s: stages {', '.join(plan.stages)}; "
          f"files in {work}, packed into {args.out}", flush=True)  # fmt: skip
    run = EvidenceRun(plan, budget, work, args.out, command, predictions)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        stages = run.run()
    except Cut:
        stages = run.stages
        print("cut by SIGTERM: the evidence of every finished stage is packed", file=sys.stderr)
    print("\n" + stage_table(stages), flush=True)
    print(f"evidence packed in {args.out}: {', '.join(PACKED_FILES)}", flush=True)
    return 1 if any(stage.status in ("failed", "cut") for stage in stages) else 0


def predicted_facts(worker: CellWorker, cell: CellSpec, stack: str) -> CellFacts:
    """``cell`` as the simulator predicts it with the engine stack ``stack``, run by ``worker``."""
    twin = simulated(cell, stack)
    return cell_facts(twin, worker.run(twin, RunLimits()))


def _predict_only(plan: Plan, path: Path, command: str) -> int:
    """Every GPU cell of ``plan`` simulated, written to ``path`` with its page beside it; nothing runs."""
    named = plan.gpu_cells()
    if not named:
        print(f"error: --predict-only: this command runs no cell on a GPU type the simulator knows ({plan.target}); "
              f"valid: --gpu {', '.join(GPU_TYPES)}", file=sys.stderr)  # fmt: skip
        return 2
    print(f"predicting {len(named)} cells with the {plan.sim_stack} stack", flush=True)
    worker = CellWorker(node_id="predictions")
    document = predictions_document([(name, cell, predicted_facts(worker, cell, plan.sim_stack))
                                     for name, cell in named], plan.sim_stack, command)  # fmt: skip
    worker.shutdown()
    path.parent.mkdir(parents=True, exist_ok=True)
    page = predictions_markdown(document)
    path.write_text(json.dumps(document, indent=2) + "\n")
    path.with_suffix(".md").write_text(page)
    print(page + f"\nwritten: {path} and {path.with_suffix('.md')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
