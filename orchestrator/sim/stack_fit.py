"""An engine stack's constants fitted on its own GPU cells (``gpu_cells``), and how well they predict a run left out
(pure: the cells come in read; nothing is written).

Each constant is fitted on the record that shows it, in three stages, so that no constant stands in for another:

1. The roofline (``compute_efficiency``, ``hbm_efficiency``, ``step_overhead_s``, ``seq_overhead_s``): the busy steps
   of the cells that run no KV connector, timed as their engine scheduled them (two steps in flight on a GPU), fitted
   by bounded least squares in seconds (requests wait for the sum of the steps, so a long step weighs as long), one set
   for every GPU type: each type's roofline is its datasheet and measured rates (``rates.py``) times the same shares.
   Fitted on each type's steps alone, the 2026-11 H100 and H200 traces give shares within 4% of each other.
2. LMCache's work in a step (``connector_costs.LMCacheStepWork``): its stores and retrieves cost what LMCache's own log
   times them at (a fixed part and a part per chunk, non-negative least squares over every logged one), and a step
   that computes prompt tokens pays the rest of what its trace shows beyond the roofline, on average. Its traces are
   read with one step in flight: its blocking save ends vLLM's asynchronous pipeline.
3. What no step shows, on mean job times (the squared log error of the censored mean, the cells weighing alike): the
   API server's time per request (``request_overhead_s``) on the cells without a connector, then native offload's
   time per load on its transfer queue (``connector_costs.NativeLoadJobs``) on the native-offload cells, each a bounded
   scalar search.

Ranges: the efficiencies are shares of a datasheet peak (at most 1); asynchronous scheduling may hide the per-step
overhead entirely (0), and 20 ms is nine times the older stack's; a request's API time up to 50 ms (the 1 JPS cells'
first turns spent 5-7 ms outside the engine's steps); a load job up to 200 ms (a 13K-token prefix is some 52,000
block copies).

Held out: ``leave_one_run_out`` fits on every run but one (a dated folder: one GPU machine's session, all its calls
together, so that a session's machine and day never inform its own prediction) and simulates the run left out. A
comparison is a policy against another over the same jobs of one call (``comparisons``): measured with a paired
bootstrap interval, simulated from the simulated cells' job times; a simulated margin under ``calibrate.TIE`` calls it
too close, and a measured interval that holds 0 is a tie.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from orchestrator.mechanisms.lmcache import CHUNK_TOKENS
from orchestrator.policies import get_policy
from orchestrator.records.intervals import Interval, censored_times, interval, margin_pct
from orchestrator.sim.calibrate import TIE
from orchestrator.sim.cell_engine import cell_sim_engine
from orchestrator.sim.connector_costs import ConnectorCosts, LMCacheStepWork, simulate_stack
from orchestrator.sim.gpu_cells import GpuCell
from orchestrator.sim.hardware import Calibration, Device, StepCost
from orchestrator.sim.loop import simulate
from orchestrator.sim.profile import predicted_step_s, step_samples
from orchestrator.sizing.models import load_model
from orchestrator.workload.schedule import schedule_for

STACK = "vllm-0.26"
BASELINE = "fcfs"
ROOFLINE_BOUNDS: dict[str, tuple[float, float]] = {
    "compute_efficiency": (0.3, 1.0),
    "hbm_efficiency": (0.3, 1.0),
    "step_overhead_s": (0.0, 0.02),
    "seq_overhead_s": (0.0, 5e-4),
}
REQUEST_OVERHEAD_BOUNDS = (0.0, 0.05)
LOAD_JOB_BOUNDS = (0.0, 0.2)
# LMCache's cells ran an asynchronous scheduler, but their steps fit the roofline only read with one step in flight
# (log step times against the roofline's: correlation 0.95-0.97 so, 0.19-0.67 read with two): its save blocks the step.
LMCACHE_STEPS_IN_FLIGHT = 1
SEARCH_TOLERANCE_S = 2e-4
_STORED = re.compile(r"LMCache INFO:.*?Stored (\d+) out of total \d+ tokens\. size: [\d.]+ GB, cost ([\d.]+) ms")
_RETRIEVED = re.compile(r"LMCache INFO:.*?Retrieved (\d+) out of \d+ required tokens.*?cost ([\d.]+) ms")


@dataclass(frozen=True)
class StackCalibration:
    """One engine stack's constants: the roofline and request overhead (``calibration``, whose ``lmcache_save_*`` are
    zero: LMCache's work is ``connectors.lmcache``) and the connectors' costs."""

    calibration: Calibration
    connectors: ConnectorCosts

    def constants(self) -> dict[str, float]:
        """Every fitted constant by name (the calibration's under theirs, the connectors' prefixed)."""
        roofline = {name: getattr(self.calibration, name) for name in (*ROOFLINE_BOUNDS, "request_overhead_s")}
        lmcache = {f"lmcache_{name}": value for name, value in asdict(self.connectors.lmcache).items()}
        return roofline | lmcache | {"native_load_job_s": self.connectors.native_load_job_s}


def connector_of(cell: GpuCell) -> str:
    """The name of the tier mechanism the cell's policy runs ("none": no KV connector)."""
    return get_policy(cell.policy).tier.name


# -- simulating a measured cell -----------------------------------------------------------------------------------


def simulated_job_times(cell: GpuCell, stack: StackCalibration | None) -> pd.Series:
    """The cell's simulated twin (its schedule, pool, batch limits and tier, as a sweep's worker simulates it), each
    job's censored time by ``job_index``; ``stack`` None: the shipped calibration and engine."""
    engine = cell_sim_engine(cell.setup, cell.workload)
    schedule = schedule_for(cell.workload)
    if stack is None:
        result = simulate(cell.workload, engine, schedule)
    else:
        cost = StepCost(load_model(cell.setup.model), engine.cost.device, stack.calibration, tp=cell.setup.tp)
        result = simulate_stack(cell.workload, replace(engine, cost=cost), stack.connectors, schedule)
    jobs = sorted(result.jobs, key=lambda job: job.job_index)
    ends = np.array([np.nan if job.finished_at is None else job.finished_at for job in jobs], dtype=float)
    times = censored_times(np.array([job.arrival_at for job in jobs], dtype=float), ends)
    return pd.Series(times, index=[job.job_index for job in jobs])


def log_error(cells: Sequence[GpuCell], stack: StackCalibration) -> float:
    """Mean squared log error of the censored mean job time over ``cells``."""
    return float(np.mean([math.log(simulated_job_times(cell, stack).mean() / cell.jct_mean_s) ** 2 for cell in cells]))


# -- stage 1: the roofline from the steps ----------------------------------------------------------------------------


def roofline_steps(cells: Sequence[GpuCell]) -> pd.DataFrame:
    """The busy steps (``profile.step_samples``) of the cells without a KV connector that kept a trace, each with its
    GPU type and model."""
    frames = [step_samples(cell.trace, cell.steps_in_flight).assign(gpu=cell.gpu, model=cell.setup.model)
              for cell in cells if cell.trace is not None and connector_of(cell) == "none"]  # fmt: skip
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def predicted_steps(steps: pd.DataFrame, calibration: Calibration) -> np.ndarray:
    """What ``calibration`` predicts for each of ``steps`` on its own GPU type and model, in row order."""
    predicted = pd.Series(0.0, index=steps.index)
    for (gpu, model), rows in steps.groupby(["gpu", "model"]):
        predicted[rows.index] = predicted_step_s(StepCost(load_model(model), Device.gpu(gpu), calibration), rows)
    return predicted.to_numpy()


def fit_roofline(steps: pd.DataFrame, start: Calibration) -> Calibration:
    """``start`` with the roofline's constants that best explain ``steps``, in seconds, within ``ROOFLINE_BOUNDS``."""
    from scipy.optimize import least_squares

    names = list(ROOFLINE_BOUNDS)
    lower, upper = (np.array([bounds[i] for bounds in ROOFLINE_BOUNDS.values()]) for i in (0, 1))
    measured = steps.duration_s.to_numpy(float)

    def residuals(x: np.ndarray) -> np.ndarray:  # in units of 5 ms, as profile.fit_step_costs
        return (predicted_steps(steps, start.with_values(**dict(zip(names, x)))) - measured) / 0.005

    x0 = np.clip([getattr(start, name) for name in names], lower, upper)
    found = least_squares(residuals, x0, bounds=(lower, upper), x_scale=(upper - lower) / 10).x
    # A constant the steps push against a bound stays there exactly (the solver stops a hair inside it).
    snapped = np.where(found - lower < 1e-9 * (upper - lower), lower, np.where(upper - found < 1e-9 * (upper - lower),
                                                                                upper, found))  # fmt: skip
    return start.with_values(**{name: float(value) for name, value in zip(names, snapped)})


def step_errors(steps: pd.DataFrame, calibration: Calibration) -> dict[str, float]:
    """Per GPU type, the median relative error of the predicted step times."""
    errors = np.abs(predicted_steps(steps, calibration) / steps.duration_s.to_numpy(float) - 1)
    return {gpu: float(np.median(errors[(steps.gpu == gpu).to_numpy()])) for gpu in sorted(set(steps.gpu))}


# -- stage 2: LMCache's work from its log and its traces ------------------------------------------------------------


def logged_work(server_log: str) -> tuple[np.ndarray, np.ndarray]:
    """LMCache's stores and retrieves in its log, each as rows of (tokens, seconds)."""
    stores, retrieves = ([(int(tokens), float(ms) / 1e3) for tokens, ms in pattern.findall(server_log)]
                         for pattern in (_STORED, _RETRIEVED))  # fmt: skip
    return np.array(stores, dtype=float).reshape(-1, 2), np.array(retrieves, dtype=float).reshape(-1, 2)


def per_chunk_cost(work: np.ndarray) -> tuple[float, float]:
    """The fixed and per-chunk seconds (both non-negative) that best explain ``work`` (rows of tokens, seconds)."""
    from scipy.optimize import nnls

    if len(work) < 2:
        return 0.0, 0.0
    chunks = np.ceil(work[:, 0] / CHUNK_TOKENS)
    fixed, per_chunk = nnls(np.column_stack([np.ones_like(chunks), chunks]), work[:, 1])[0]
    return float(fixed), float(per_chunk)


def fit_lmcache(cells: Sequence[GpuCell], calibration: Calibration) -> LMCacheStepWork:
    """LMCache's work in a step from the LMCache cells among ``cells`` (none: no work), beside the fitted roofline."""
    lmcache = [cell for cell in cells if connector_of(cell) == "lmcache"]
    logged = [logged_work(cell.server_log) for cell in lmcache]
    store_s, store_chunk_s = per_chunk_cost(np.concatenate([stores for stores, _ in logged] or [np.empty((0, 2))]))
    retrieve_s, retrieve_chunk_s = per_chunk_cost(np.concatenate([loads for _, loads in logged] or [np.empty((0, 2))]))
    beyond, num_steps = 0.0, 0
    for cell, (stores, retrieves) in zip(lmcache, logged):
        if cell.trace is None:
            continue
        steps = step_samples(cell.trace, LMCACHE_STEPS_IN_FLIGHT).assign(gpu=cell.gpu, model=cell.setup.model)
        prompt = (steps.prefill_tokens > 0).to_numpy()
        extra = (steps.duration_s.to_numpy(float) - predicted_steps(steps, calibration))[prompt].sum()
        beyond += extra - stores[:, 1].sum() - retrieves[:, 1].sum()
        num_steps += int(prompt.sum())
    prompt_step_s = max(0.0, float(beyond) / num_steps) if num_steps else 0.0
    return LMCacheStepWork(prompt_step_s, store_s, store_chunk_s, retrieve_s, retrieve_chunk_s)


# -- stage 3: the latencies on mean job times -------------------------------------------------------------------------


def scalar_fit(cells: Sequence[GpuCell], stack_at: Callable[[float], StackCalibration],
               bounds: tuple[float, float]) -> float:  # fmt: skip
    """The value in ``bounds`` whose stack (``stack_at``) best predicts the cells' mean job times; the lower bound when
    there are no cells."""
    from scipy.optimize import minimize_scalar

    if not cells:
        return bounds[0]
    found = minimize_scalar(lambda value: log_error(cells, stack_at(value)), bounds=bounds, method="bounded",
                            options={"xatol": SEARCH_TOLERANCE_S})  # fmt: skip
    return float(found.x)


def fit_stack(cells: Sequence[GpuCell], start: Calibration | None = None) -> StackCalibration:
    """Every constant of the stack from ``cells``, stage by stage (the module's docstring)."""
    start = (start or Calibration.load()).with_values(lmcache_save_step_s=0.0, lmcache_save_chunk_s=0.0)
    steps = roofline_steps(cells)
    calibration = fit_roofline(steps, start) if len(steps) else start
    stack = StackCalibration(calibration, ConnectorCosts(fit_lmcache(cells, calibration)))
    pure = [cell for cell in cells if connector_of(cell) == "none"]
    overhead = scalar_fit(pure, lambda value: _with(stack, request_overhead_s=value), REQUEST_OVERHEAD_BOUNDS)
    stack = _with(stack, request_overhead_s=overhead)
    native = [cell for cell in cells if connector_of(cell) == "native"]
    job = scalar_fit(native, lambda value: _with_load_job(stack, value), LOAD_JOB_BOUNDS)
    return _with_load_job(stack, job)


def _with(stack: StackCalibration, **values: float) -> StackCalibration:
    return replace(stack, calibration=stack.calibration.with_values(**values))


def _with_load_job(stack: StackCalibration, load_job_s: float) -> StackCalibration:
    return replace(stack, connectors=replace(stack.connectors, native_load_job_s=load_job_s))


# -- held out, and what the predictions call ------------------------------------------------------------------------


@dataclass(frozen=True)
class Fold:
    """One run left out: the stack fitted on every other run, and the left-out cells' simulated job times by key."""

    run: str
    stack: StackCalibration
    job_times: dict[str, pd.Series]


def leave_one_run_out(cells: Sequence[GpuCell], fit: Callable[[Sequence[GpuCell]], StackCalibration] = fit_stack,
                      simulate_cell: Callable[[GpuCell, StackCalibration], pd.Series] = simulated_job_times
                      ) -> list[Fold]:  # fmt: skip
    """For each run (``RunId.run``), ``fit`` on the cells of every other run and simulate the run's own cells."""
    folds = []
    for run in sorted({cell.run.run for cell in cells}):
        stack = fit([cell for cell in cells if cell.run.run != run])
        held = {cell.key: simulate_cell(cell, stack) for cell in cells if cell.run.run == run}
        folds.append(Fold(run, stack, held))
    return folds


def relative_error(simulated: pd.Series, cell: GpuCell) -> float:
    return float(simulated.mean() / cell.jct_mean_s - 1)


def error_summary(cells: Sequence[GpuCell], times: dict[str, pd.Series]) -> dict[str, dict[str, float]]:
    """Per "policy GPU" and over "all": the number of cells, and the median and worst |relative error| of mean JCT."""
    groups: dict[str, list[float]] = {}
    for cell in cells:
        error = abs(relative_error(times[cell.key], cell))
        for name in (f"{cell.policy} {cell.gpu}", "all"):
            groups.setdefault(name, []).append(error)
    return {name: {"cells": len(errors), "median": float(np.median(errors)), "worst": float(max(errors))}
            for name, errors in sorted(groups.items())}  # fmt: skip


@dataclass(frozen=True)
class Comparison:
    """A policy's ``cell`` against its ``rival``'s over the jobs both ran: how much lower its mean job time is, in percent
    of the rival's (negative: slower), measured with a paired bootstrap interval."""

    label: str  # the call that ran ``cell``
    cell: GpuCell
    rival: GpuCell
    measured: Interval

    @property
    def measured_call(self) -> str:
        return "tie" if self.measured.lo <= 0 <= self.measured.hi else ("win" if self.measured.estimate > 0 else "loss")

    def simulated_pct(self, times: dict[str, pd.Series]) -> float:
        """The simulated margin over the same jobs."""
        common = self.cell.job_times.index.intersection(self.rival.job_times.index)
        return float(margin_pct(times[self.cell.key][common].to_numpy(), times[self.rival.key][common].to_numpy()))

    def simulated_call(self, times: dict[str, pd.Series]) -> str:
        pct = self.simulated_pct(times)
        return "tie" if abs(pct) < TIE * 100 else ("win" if pct > 0 else "loss")

    def predicted(self, times: dict[str, pd.Series]) -> bool:
        """The simulator calls what was measured: the same winner, or too close where the measurement is a tie."""
        return self.simulated_call(times) == self.measured_call


def comparisons(cells: Sequence[GpuCell]) -> list[Comparison]:
    """Each cell against each of its rival policies' cells on the same schedule and engine in its run, its own call's
    first (``_rival_policies``)."""
    found = []
    for cell in cells:
        for policy in _rival_policies(cell.policy):
            rivals = sorted((other for other in cells if other.policy == policy and _comparable(cell, other)),
                            key=lambda other: other.run != cell.run)  # fmt: skip
            if rivals:
                found.append(_compared(cell, rivals[0]))
    return found


def _rival_policies(policy: str) -> list[str]:
    """``BASELINE`` for every other policy, and lmcache for native-offload: the two CPU tiers at equal hits."""
    return ([] if policy == BASELINE else [BASELINE]) + (["lmcache"] if policy == "native-offload" else [])


def _comparable(cell: GpuCell, other: GpuCell) -> bool:
    """Both ran in one run, on one schedule, on the same engine but for the policy and its tier."""
    def engine(setup):
        return replace(setup, policy="", dram_gb=0.0, tier_gib=0.0)

    return (other is not cell and other.run.run == cell.run.run and cell.schedule_fingerprint is not None
            and other.schedule_fingerprint == cell.schedule_fingerprint and engine(other.setup) == engine(cell.setup))


def _compared(cell: GpuCell, rival: GpuCell) -> Comparison:
    common = cell.job_times.index.intersection(rival.job_times.index)
    measured = interval([(cell.job_times[common].to_numpy(), rival.job_times[common].to_numpy())], margin_pct)
    return Comparison(cell.run.label, cell, rival, measured)


# -- the stack as a calibration file --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Provenance:
    """What a fit saw: its runs and cells, and the records each stage read."""

    runs: tuple[str, ...]
    num_cells: int
    num_roofline_steps: int
    num_lmcache_stores: int
    num_lmcache_retrieves: int
    num_overhead_cells: int
    num_native_cells: int

    @classmethod
    def of(cls, cells: Sequence[GpuCell]) -> Provenance:
        logged = [logged_work(cell.server_log) for cell in cells if connector_of(cell) == "lmcache"]
        return cls(runs=tuple(sorted({cell.run.run for cell in cells})), num_cells=len(cells),
                   num_roofline_steps=len(roofline_steps(cells)), num_lmcache_stores=sum(len(s) for s, _ in logged),
                   num_lmcache_retrieves=sum(len(r) for _, r in logged),
                   num_overhead_cells=sum(connector_of(cell) == "none" for cell in cells),
                   num_native_cells=sum(connector_of(cell) == "native" for cell in cells))  # fmt: skip


def at_bounds(calibration: Calibration) -> dict[str, str]:
    """The roofline constants at a bound of their range (``fit_roofline`` leaves one exactly there when the steps push
    it there: they do not determine it), each with a note."""
    return {name: f" (at the {'lower' if getattr(calibration, name) == lower else 'upper'} bound of its range)"
            for name, (lower, upper) in ROOFLINE_BOUNDS.items() if getattr(calibration, name) in (lower, upper)}


def stack_toml(stack: StackCalibration, seen: Provenance, name: str = STACK) -> str:
    """The stack's constants as TOML, each with where it came from. Its ``[calibration]`` table is what
    ``Calibration.load`` reads."""
    calibration, lmcache, bounds = stack.calibration, stack.connectors.lmcache, at_bounds(stack.calibration)
    roofline = f"least squares over {seen.num_roofline_steps:,} busy steps of the cells without a connector"
    sources = {name: roofline if index == 0 else "the same fit" for index, name in enumerate(ROOFLINE_BOUNDS)}
    sources["request_overhead_s"] = f"mean job times of the {seen.num_overhead_cells} cells without a connector"
    lines = [f"# The simulator's constants for the engine stack {name}, fitted by `python benchmarks/stack_fit.py` on "
             f"{seen.num_cells} GPU cells", f"# of the runs {', '.join(seen.runs)} (docs/gpu-runs);",
             "# orchestrator/sim/stack_fit.py says how each stage fits its constants.", "", "[stack]",
             f'name = "{name}"', "", "[calibration]"]  # fmt: skip
    lines += [f"{key} = {getattr(calibration, key):.6g}  # {source}{bounds.get(key, '')}"
              for key, source in sources.items()]  # fmt: skip
    lines += [
        "lmcache_save_step_s = 0  # LMCache's work is [lmcache] below", "lmcache_save_chunk_s = 0", "", "[lmcache]",
        f"prompt_step_s = {lmcache.prompt_step_s:.6g}  # its traces beyond the roofline and its logged work",
        f"store_s = {lmcache.store_s:.6g}  # its log: {seen.num_lmcache_stores:,} stores, fixed part",
        f"store_chunk_s = {lmcache.store_chunk_s:.6g}  # per 256-token chunk",
        f"retrieve_s = {lmcache.retrieve_s:.6g}  # its log: {seen.num_lmcache_retrieves:,} retrieves, fixed part",
        f"retrieve_chunk_s = {lmcache.retrieve_chunk_s:.6g}  # per 256-token chunk", "", "[native_offload]",
        f"load_job_s = {stack.connectors.native_load_job_s:.6g}  # mean job times of the {seen.num_native_cells} "
        "native-offload cells",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"
