"""A GPU's evidence run (``kvsweep evidence``): what it runs (``Plan``) and its stages, in order (``STAGES``), each
planned against the time budget (``stages.StageLog``) and its cells measured on one worker (``measure.CellBench``).

1. doctor: the node's checks; 2. cells: one short cell per policy, with its evidence; 3. profile: the fcfs cell's step
trace as the GPU's rates; 4. source study: its low-load cells beside its published and simulated JCTs; 5. pressure:
the pressure plan, each cell's regime and prediction printed before it runs, then each measured beside it and every
policy's JCT against fcfs over the same jobs; 6. capacity: cells judged against an SLO as measured and as predicted.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd

from orchestrator.cell.spec import CellSpec
from orchestrator.evidence.budget import DOCTOR_S, PROFILE_S, Budget
from orchestrator.evidence.checks import node_checks, stack_check
from orchestrator.evidence.held_out import Prediction, held_out_stage
from orchestrator.evidence.measure import CellBench, CellRunner, predicted_facts, why_not_done
from orchestrator.evidence.pack import EvidenceHeader, StageResult, seconds
from orchestrator.evidence.pressure import BASELINE, CellFacts, PressurePoint, cell_facts, margins, winner
from orchestrator.evidence.stages import StageLog, from_checks
from orchestrator.gpus import CPU, GPU_TYPES
from orchestrator.inputs.validation import first_line
from orchestrator.mechanisms.tier import NodeNeed
from orchestrator.models.arch import load_model
from orchestrator.models.served import served_model
from orchestrator.policies.catalog import get_policy
from orchestrator.records.cell import CellOutcome
from orchestrator.records.layout import CellFiles
from orchestrator.records.slo import Slo
from orchestrator.records.summary import CellSummary, summarize
from orchestrator.roofline.hardware import Calibration, Device
from orchestrator.sim.calibrate import MeasuredCell, measured_cells, simulated_jct
from orchestrator.sim.gpu_profile import measure_profile, step_error, trace_steps
from orchestrator.sim.profile import CPU_STEP_BOUNDS, fit_step_costs
from orchestrator.sim.stacks import DEFAULT_STACK
from orchestrator.sizing.kv import Regime
from orchestrator.sweep.planning.preflight import preflight
from orchestrator.sweep.runtime.worker import CellWorker

STAGES = ("doctor", "cells", "profile", "source-study", "pressure", "capacity")
PROFILED_POLICY = "fcfs"
MIN_PROFILE_STEPS = 20
BUILT_FOR_GPU = "H100"  # the GPU a CUDA-only policy's command line is built for in a CPU rehearsal
UNREAD_STACK = "(read by the doctor, or by the first cell)"


@dataclass(frozen=True)
class PolicyCell:
    """A policy of the cells stage: its cell, or, for a CUDA-only policy on cpu, the server command it would run
    on a GPU (built, never started)."""

    policy: str
    cell: CellSpec | None
    gpu_command: str | None = None


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


class EvidenceRun:
    """The stages of one run; ``stages`` is what they recorded, whole even where a SIGTERM cut the run."""

    def __init__(self, plan: Plan, budget: Budget, work: Path, out: Path, command: str,
                 predictions: Sequence[Prediction] = (), worker: CellRunner | None = None):  # fmt: skip
        self.plan, self.budget, self.work, self.predictions = plan, budget, work, predictions
        self.on_gpu = plan.target != CPU
        self.bench = CellBench(worker or CellWorker(), budget, self.on_gpu)
        header = EvidenceHeader(command, plan.target, _device_name(self.on_gpu), UNREAD_STACK, budget.total_s)
        self.log = StageLog(budget, work, out, header)

    @property
    def stages(self) -> list[StageResult]:
        return self.log.stages

    def run(self) -> list[StageResult]:
        try:
            for name in self.plan.stages:
                getattr(self, "_" + name.replace("-", "_"))()
            if self.predictions:
                self.log.record(held_out_stage(self.predictions, self.bench.measured_jct_s))
        finally:
            self.bench.worker.shutdown()
        return self.stages

    def _doctor(self) -> None:
        def body() -> StageResult:
            cells = [entry.cell for entry in self.plan.cells if entry.cell is not None]
            cell = (cells or list(self.plan.source_study))[0]
            needs_lmcache = any(NodeNeed.LMCACHE in get_policy(cell.policy).needs for cell in cells)
            checks = node_checks(self.plan.target, cell.model, cell.weights, needs_lmcache)
            # The stack check's detail names what the node has, as the doctor read it: no second probe.
            stack = next(check.detail for check in checks if check.name == "serving stack")
            self.log.header = replace(self.log.header, stack=stack)
            return from_checks("doctor", checks, "the node's checks", self.work / "doctor")

        self.log.stage("doctor", DOCTOR_S, body)

    def _cells(self) -> None:
        for entry in self.plan.cells:
            name = f"cell {entry.policy}"
            if entry.cell is None:
                self._record_built(name, entry)
                continue
            self.log.stage(name, self.budget.cell_estimate_s(entry.cell.workload, needs_start=True),
                           lambda cell=entry.cell, name=name: self._checked(name, cell, "cells")[0])  # fmt: skip

    def _record_built(self, name: str, entry: PolicyCell) -> None:
        """A CUDA-only policy's cell on cpu: not run, the server command it runs on a GPU built and kept."""
        why = f"needs CUDA, not run on cpu; its {BUILT_FOR_GPU} server command built"
        self.log.record(StageResult(name, "skipped", 0.0, why, entry.gpu_command or "",
                                    {"server_command": entry.gpu_command}))  # fmt: skip

    def _checked(self, name: str, cell: CellSpec, stage: str) -> tuple[StageResult, CellOutcome]:
        """``cell`` measured with its evidence; the first cell to read the node's stack names it where no doctor
        ran."""
        result, outcome = self.bench.checked(name, cell, self.work / cell_folder(stage, cell))
        if self.log.header.stack == UNREAD_STACK and outcome.config.stack is not None:
            needs_lmcache = NodeNeed.LMCACHE in get_policy(cell.policy).needs
            stack = stack_check(self.plan.target, outcome.config.stack, needs_lmcache).detail
            self.log.header = replace(self.log.header, stack=stack)
        return result, outcome

    def _profile(self) -> None:
        trace = CellFiles(self.work / "cells" / PROFILED_POLICY).scheduler_trace
        if not trace.is_file():
            self.log.record(StageResult("profile", "skipped", 0.0, f"no {PROFILED_POLICY} cell trace to profile"))
            return
        self.log.stage("profile", PROFILE_S, lambda: self._profile_trace(trace))

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
            name = f"{stage} {cell.policy} {cell.jps:g} JPS"
            self.log.stage(name, self.budget.cell_estimate_s(cell.workload, self.bench.needs_start(cell)),
                           lambda cell=cell, name=name: body(cell, name))  # fmt: skip

    def _source_cell(self, cell: CellSpec, name: str) -> StageResult:
        outcome, summary = self.bench.measured(cell, self.work / cell_folder("source-study", cell))
        if summary is None or summary.jct_mean_s is None:
            return StageResult(name, "failed", 0.0, why_not_done(outcome))
        published = _published_jct(cell)
        simulated = (simulated_jct(MeasuredCell("large_dram", cell.gpu, cell.policy, cell.jps, 0.0, 0.0),
                                   Calibration.load()) if cell.gpu in GPU_TYPES else None)  # fmt: skip
        facts = {"jct_mean_s": summary.jct_mean_s, "published_jct_s": published, "simulated_jct_s": simulated,
                 "completed": summary.num_completed, "jobs": summary.num_jobs}  # fmt: skip
        detail = (f"mean JCT {summary.jct_mean_s:.2f} s ({summary.num_completed}/{summary.num_jobs} jobs); published "
                  f"{seconds(published)}, simulated {seconds(simulated)}")  # fmt: skip
        return StageResult(name, "done", 0.0, detail, facts=facts)

    def _pressure(self) -> None:
        """The plan printed first (each cell's regime and prediction), then each cell measured beside its prediction,
        then every policy's JCT against the baseline's over the same jobs."""
        point = self.plan.pressure_point
        predicted = {entry.policy: prediction for entry in self.plan.pressure
                     if entry.cell and (prediction := self._predicted(entry.cell)) is not None}  # fmt: skip
        plan_facts = {"point": asdict(point), "predicted": {p: f.as_dict() for p, f in predicted.items()}}
        table = _plan_table(self.plan.pressure, predicted)
        self.log.record(StageResult("pressure plan", "done", 0.0, point.describe(), table, plan_facts))
        measured: dict[str, tuple[CellFacts, CellOutcome]] = {}
        for entry in self.plan.pressure:
            name = f"pressure {entry.policy}"
            if entry.cell is None:
                self._record_built(name, entry)
                continue
            prediction = predicted.get(entry.policy)
            span_s = prediction.span_s if prediction is not None else None
            estimate = self.budget.cell_estimate_s(entry.cell.workload, self.bench.needs_start(entry.cell), span_s)
            self.log.stage(name, estimate, lambda cell=entry.cell: self._pressure_cell(cell, prediction, measured))
        if BASELINE in measured and len(measured) > 1:  # a policy to hold against the baseline
            self.log.record(verdict_stage(measured, predicted))

    def _pressure_cell(self, cell: CellSpec, prediction: CellFacts | None,
                       measured: dict[str, tuple[CellFacts, CellOutcome]]) -> StageResult:  # fmt: skip
        result, outcome = self._checked(f"pressure {cell.policy}", cell, "pressure")
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

    def _capacity(self) -> None:
        """Each cell judged against the SLO, measured beside the simulator's judgement of the same cell."""
        self._cell_stages("capacity", self.plan.capacity, self._capacity_cell)

    def _capacity_cell(self, cell: CellSpec, name: str) -> StageResult:
        slo = self.plan.slo
        outcome, measured = self.bench.measured(cell, self.work / cell_folder("capacity", cell), slo)
        if measured is None:
            return StageResult(name, "failed", 0.0, why_not_done(outcome))
        twin = self.bench.simulated(cell, self.plan.sim_stack) if cell.gpu in GPU_TYPES else None  # cpu: no roofline
        predicted = summarize(twin.requests, twin.jobs, twin.scheduler_trace, slo, cell.jps) if twin else None
        facts = {"policy": cell.policy, "jps": cell.jps, "slo": str(slo), "measured": _slo_facts(measured),
                 "predicted": _slo_facts(predicted) if predicted else None,
                 "replica_start_s": outcome.config.replica_start_s}  # fmt: skip
        detail = f"{slo}: measured {_slo_line(measured)}" + (f"; predicted {_slo_line(predicted)}" if predicted else "")
        return StageResult(name, "done", 0.0, detail, facts=facts)

    def _predicted(self, cell: CellSpec) -> CellFacts | None:
        """The simulator's prediction of ``cell`` (None where it has no roofline: cpu)."""
        return predicted_facts(self.bench.worker, cell, self.plan.sim_stack) if cell.gpu in GPU_TYPES else None


# -- what the stages print and keep ------------------------------------------------------------------------


def _slo_facts(summary: CellSummary) -> dict:
    return {"slo_met": summary.slo_met, "jct_p90_s": summary.jct_p90_s, "jct_mean_s": summary.jct_mean_s,
            "good_pct": summary.good_pct, "good_lo_pct": summary.good_lo_pct, "good_hi_pct": summary.good_hi_pct,
            "num_completed": summary.num_completed, "num_jobs": summary.num_jobs}  # fmt: skip


def _slo_line(summary: CellSummary) -> str:
    return (f"{summary.slo_met} (p90 JCT {seconds(summary.jct_p90_s)}, {summary.good_pct:.0f}% of "
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
    text = (f"{label}: {facts.completed}/{facts.jobs} jobs, mean JCT {seconds(facts.jct_mean_s)}, p90 "
            f"{seconds(facts.jct_p90_s)}, TTFT p50 {seconds(facts.ttft_p50_s)}, span {seconds(facts.span_s)}, GPU "
            f"prefix {facts.gpu_hit_share or 0:.0%} of {facts.prompt_tokens:,.0f} prompt tokens")  # fmt: skip
    if facts.tier_hit_tokens is not None:
        share = f" ({facts.tier_served_share:.0%})" if facts.tier_served_share is not None else ""
        looked_up = f" of {facts.tier_looked_up_tokens:,.0f} looked up" if facts.tier_looked_up_tokens else ""
        text += (f", CPU tier stored {facts.tier_stored_tokens or 0:,.0f} tokens ({facts.tier_stored_from}) and served "
                 f"{facts.tier_hit_tokens:,.0f}{looked_up}{share}")  # fmt: skip
    if facts.preemptions is not None:
        text += f", {facts.preemptions} preemptions"
    return text


def verdict_stage(measured: dict[str, tuple[CellFacts, CellOutcome]], predicted: dict[str, CellFacts]) -> StageResult:
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


def _device_name(on_gpu: bool) -> str:
    if not on_gpu:
        return f"this machine's CPU ({os.cpu_count()} cores)"
    try:
        query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip() or "no GPU answered"
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"nvidia-smi failed: {first_line(error)}"
