"""An engine stack's constants fitted on its own GPU cells (``gpu_cells``), and how well they predict a run left out
(pure: the cells come in read; the stack's file is text for the caller to write, ``stacks.py`` reads it).

Each constant is fitted on the record that shows it, in three stages, so that no constant stands in for another:

1. The roofline (``compute_efficiency``, ``hbm_efficiency``, ``step_overhead_s``, ``seq_overhead_s``): the busy steps
   of the cells that run no KV connector, timed as their engine scheduled them (two steps in flight on a GPU), fitted
   by bounded least squares in seconds (requests wait for the sum of the steps, so a long step weighs as long), one set
   for every GPU type: each type's roofline is its datasheet and measured rates (``roofline.rates``) times the same
   shares. Fitted on each type's steps alone, the 2026-11 H100 and H200 traces give shares within 4% of each other.
2. LMCache's work in a step (``lmcache_*``, ``LMCacheCpuTier.step_work_s``): its stores and retrieves cost what
   LMCache's own log times them at (a fixed part and a part per chunk, non-negative least squares over every logged
   one), and a step that computes prompt tokens pays the rest of what its trace shows beyond the roofline, on average.
   Its traces are read with one step in flight: its blocking save ends vLLM's asynchronous pipeline.
3. What no step shows, on mean job times (the squared log error of the censored mean, the cells weighing alike): the
   API server's time per request (``request_overhead_s``) on the cells without a connector, then native offload's
   time per load on its transfer queue (``native_load_job_s``, ``NativeOffload.load_s``) on the native-offload cells,
   then simple offload's wait per store (``simple_store_s``, ``SimpleOffload.step_work_s``) on its cells, each a
   bounded scalar search.

Every cell is simulated as a sweep's worker simulates it (``cell_engine.cell_sim_engine``, ``loop.simulate``), with
the calibration under test.

Ranges: the efficiencies are shares of a datasheet peak (at most 1); asynchronous scheduling may hide the per-step
overhead entirely (0), and 20 ms is nine times the older stack's; a request's API time up to 50 ms (the 1 JPS cells'
first turns spent 5-7 ms outside the engine's steps); a load job up to 200 ms (a 13K-token prefix is some 52,000
block copies).

Held out: ``leave_one_run_out`` fits on every run but one (a dated folder: one GPU machine's session, all its calls
together, so that a session's machine and day never inform its own prediction) and simulates the run left out. A
comparison is a policy against another over the same jobs of one call (``comparisons``): measured with a paired
bootstrap interval, simulated from the simulated cells' job times; a simulated margin under ``error_bands.TIE`` calls
it too close, and a measured interval that holds 0 is a tie. The held-out errors per policy (``held_out_errors``) are
the stack's error bands (``stacks.SimStack.errors``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from orchestrator.mechanisms.lmcache import CHUNK_TOKENS
from orchestrator.models.arch import load_model
from orchestrator.policies.catalog import get_policy
from orchestrator.records.intervals import Interval, censored_times, interval, margin_pct
from orchestrator.roofline.hardware import Calibration, Device, StepCost
from orchestrator.sim.cell_engine import cell_sim_engine
from orchestrator.sim.error_bands import TIE
from orchestrator.sim.gpu_cells import GpuCell
from orchestrator.sim.loop import simulate
from orchestrator.sim.profile import predicted_step_s, step_samples
from orchestrator.workload.schedule import schedule_for

BASELINE = "fcfs"
ROOFLINE_BOUNDS: dict[str, tuple[float, float]] = {
    "compute_efficiency": (0.3, 1.0),
    "hbm_efficiency": (0.3, 1.0),
    "step_overhead_s": (0.0, 0.02),
    "seq_overhead_s": (0.0, 5e-4),
}
REQUEST_OVERHEAD_BOUNDS = (0.0, 0.05)
LOAD_JOB_BOUNDS = (0.0, 0.2)
STORE_BOUNDS = (0.0, 0.05)
# The connectors' constants this fit sets (``hardware.Calibration``); the source study's save stall is not one of them.
LMCACHE_CONSTANTS = ("lmcache_prompt_step_s", "lmcache_store_s", "lmcache_store_chunk_s", "lmcache_retrieve_s",
                     "lmcache_retrieve_chunk_s")  # fmt: skip
FITTED = (*ROOFLINE_BOUNDS, "request_overhead_s", *LMCACHE_CONSTANTS, "native_load_job_s", "simple_store_s")
# LMCache's cells ran an asynchronous scheduler, but their steps fit the roofline only read with one step in flight
# (log step times against the roofline's: correlation 0.95-0.97 so, 0.19-0.67 read with two): its save blocks the step.
LMCACHE_STEPS_IN_FLIGHT = 1
SEARCH_TOLERANCE_S = 2e-4
_STORED = re.compile(r"LMCache INFO:.*?Stored (\d+) out of total \d+ tokens\. size: [\d.]+ GB, cost ([\d.]+) ms")
_RETRIEVED = re.compile(r"LMCache INFO:.*?Retrieved (\d+) out of \d+ required tokens.*?cost ([\d.]+) ms")


def constants(calibration: Calibration) -> dict[str, float]:
    """Every constant the fit sets, by name."""
    return {name: getattr(calibration, name) for name in FITTED}


def connector_of(cell: GpuCell) -> str:
    """The name of the tier mechanism the cell's policy runs ("none": no KV connector)."""
    return get_policy(cell.policy).tier.name


# -- simulating a measured cell -----------------------------------------------------------------------------------


def simulated_job_times(cell: GpuCell, calibration: Calibration | None) -> pd.Series:
    """The cell's simulated twin (its schedule, pool, batch limits and tier, as a sweep's worker simulates it) under
    ``calibration`` (None: the source study's), each job's censored time by ``job_index``."""
    engine = cell_sim_engine(cell.setup, cell.workload, calibration=calibration)
    result = simulate(cell.workload, engine, schedule_for(cell.workload))
    jobs = sorted(result.jobs, key=lambda job: job.job_index)
    ends = np.array([np.nan if job.finished_at is None else job.finished_at for job in jobs], dtype=float)
    times = censored_times(np.array([job.arrival_at for job in jobs], dtype=float), ends)
    return pd.Series(times, index=[job.job_index for job in jobs])


def log_error(cells: Sequence[GpuCell], calibration: Calibration) -> float:
    """Mean squared log error of the censored mean job time over ``cells``."""
    return float(np.mean([math.log(simulated_job_times(cell, calibration).mean() / cell.jct_mean_s) ** 2
                          for cell in cells]))  # fmt: skip


# -- stage 1: the roofline from the steps ----------------------------------------------------------------------------


def roofline_steps(cells: Sequence[GpuCell]) -> pd.DataFrame:
    """The busy steps (``profile.step_samples``) of the cells without a KV connector that kept a trace, each with its
    GPU type and model."""
    frames = [step_samples(cell.scheduler_trace, cell.steps_in_flight).assign(gpu=cell.gpu, model=cell.setup.model)
              for cell in cells if cell.scheduler_trace is not None and connector_of(cell) == "none"]  # fmt: skip
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


def fit_lmcache(cells: Sequence[GpuCell], calibration: Calibration) -> Calibration:
    """``calibration`` (its roofline fitted) with LMCache's work in a step from the LMCache cells among ``cells`` (none:
    no work)."""
    lmcache = [cell for cell in cells if connector_of(cell) == "lmcache"]
    logged = [logged_work(cell.server_log) for cell in lmcache]
    store_s, store_chunk_s = per_chunk_cost(np.concatenate([stores for stores, _ in logged] or [np.empty((0, 2))]))
    retrieve_s, retrieve_chunk_s = per_chunk_cost(np.concatenate([loads for _, loads in logged] or [np.empty((0, 2))]))
    beyond, num_steps = 0.0, 0
    for cell, (stores, retrieves) in zip(lmcache, logged):
        if cell.scheduler_trace is None:
            continue
        steps = step_samples(cell.scheduler_trace, LMCACHE_STEPS_IN_FLIGHT).assign(gpu=cell.gpu, model=cell.setup.model)
        prompt = (steps.prefill_tokens > 0).to_numpy()
        extra = (steps.duration_s.to_numpy(float) - predicted_steps(steps, calibration))[prompt].sum()
        beyond += extra - stores[:, 1].sum() - retrieves[:, 1].sum()
        num_steps += int(prompt.sum())
    prompt_step_s = max(0.0, float(beyond) / num_steps) if num_steps else 0.0
    return calibration.with_values(**dict(zip(LMCACHE_CONSTANTS, (prompt_step_s, store_s, store_chunk_s, retrieve_s,
                                                                  retrieve_chunk_s))))  # fmt: skip


# -- stage 3: the latencies on mean job times -------------------------------------------------------------------------


def scalar_fit(cells: Sequence[GpuCell], calibration_at: Callable[[float], Calibration],
               bounds: tuple[float, float]) -> float:  # fmt: skip
    """The value in ``bounds`` whose calibration (``calibration_at``) best predicts the cells' mean job times; the lower
    bound when there are no cells."""
    from scipy.optimize import minimize_scalar

    if not cells:
        return bounds[0]
    found = minimize_scalar(lambda value: log_error(cells, calibration_at(value)), bounds=bounds, method="bounded",
                            options={"xatol": SEARCH_TOLERANCE_S})  # fmt: skip
    return float(found.x)


def fit_stack(cells: Sequence[GpuCell], start: Calibration | None = None) -> Calibration:
    """Every constant of the stack from ``cells``, stage by stage (the module's docstring), from ``start`` (default:
    the source study's) without its connectors' costs: LMCache's work here is ``LMCACHE_CONSTANTS``, not the source
    study's save stall, which would charge it twice."""
    unset = dict.fromkeys(("lmcache_save_step_s", "lmcache_save_chunk_s", *LMCACHE_CONSTANTS, "native_load_job_s",
                           "simple_store_s"), 0.0)  # fmt: skip
    start = (start or Calibration.load()).with_values(**unset)
    steps = roofline_steps(cells)
    calibration = fit_lmcache(cells, fit_roofline(steps, start) if len(steps) else start)
    pure = [cell for cell in cells if connector_of(cell) == "none"]
    overhead = scalar_fit(pure, lambda value: calibration.with_values(request_overhead_s=value), REQUEST_OVERHEAD_BOUNDS)
    calibration = calibration.with_values(request_overhead_s=overhead)
    native = [cell for cell in cells if connector_of(cell) == "native"]
    job = scalar_fit(native, lambda value: calibration.with_values(native_load_job_s=value), LOAD_JOB_BOUNDS)
    calibration = calibration.with_values(native_load_job_s=job)
    simple = [cell for cell in cells if connector_of(cell) == "simple"]
    store = scalar_fit(simple, lambda value: calibration.with_values(simple_store_s=value), STORE_BOUNDS)
    return calibration.with_values(simple_store_s=store)


# -- held out, and what the predictions call ------------------------------------------------------------------------


@dataclass(frozen=True)
class Fold:
    """One run left out: the stack fitted on every other run, and the left-out cells' simulated job times by key."""

    run: str
    calibration: Calibration
    job_times: dict[str, pd.Series]


def leave_one_run_out(cells: Sequence[GpuCell], fit: Callable[[Sequence[GpuCell]], Calibration] = fit_stack,
                      simulate_cell: Callable[[GpuCell, Calibration], pd.Series] = simulated_job_times
                      ) -> list[Fold]:  # fmt: skip
    """For each run (``RunId.run``), ``fit`` on the cells of every other run and simulate the run's own cells."""
    folds = []
    for run in sorted({cell.run.run for cell in cells}):
        calibration = fit([cell for cell in cells if cell.run.run != run])
        held = {cell.key: simulate_cell(cell, calibration) for cell in cells if cell.run.run == run}
        folds.append(Fold(run, calibration, held))
    return folds


def held_out(folds: Sequence[Fold]) -> dict[str, pd.Series]:
    """Every cell's job times as the fold that left its run out simulated them, by key."""
    return {key: times for fold in folds for key, times in fold.job_times.items()}


def relative_error(simulated: pd.Series, cell: GpuCell) -> float:
    return float(simulated.mean() / cell.jct_mean_s - 1)


def held_out_errors(cells: Sequence[GpuCell], times: dict[str, pd.Series]) -> dict[str, float]:
    """Per policy, the root mean square of the relative error of mean JCT over its cells (``times``: each cell's
    simulated job times, by key, from the fold that left its run out): the stack's error band for the policy."""
    squares: dict[str, list[float]] = {}
    for cell in cells:
        squares.setdefault(cell.policy, []).append(relative_error(times[cell.key], cell) ** 2)
    return {policy: math.sqrt(float(np.mean(values))) for policy, values in sorted(squares.items())}


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
    """What a fit saw: its runs, GPU types and cells, and the records each stage read."""

    runs: tuple[str, ...]
    gpus: tuple[str, ...]
    num_cells: int
    num_roofline_steps: int
    num_lmcache_stores: int
    num_lmcache_retrieves: int
    num_overhead_cells: int
    num_native_cells: int
    num_simple_cells: int

    @classmethod
    def of(cls, cells: Sequence[GpuCell]) -> Provenance:
        logged = [logged_work(cell.server_log) for cell in cells if connector_of(cell) == "lmcache"]
        return cls(runs=tuple(sorted({cell.run.run for cell in cells})), gpus=tuple(sorted({cell.gpu for cell in cells})),
                   num_cells=len(cells), num_roofline_steps=len(roofline_steps(cells)),
                   num_lmcache_stores=sum(len(s) for s, _ in logged),
                   num_lmcache_retrieves=sum(len(r) for _, r in logged),
                   num_overhead_cells=sum(connector_of(cell) == "none" for cell in cells),
                   num_native_cells=sum(connector_of(cell) == "native" for cell in cells),
                   num_simple_cells=sum(connector_of(cell) == "simple" for cell in cells))  # fmt: skip


def at_bounds(calibration: Calibration) -> dict[str, str]:
    """The roofline constants at a bound of their range (``fit_roofline`` leaves one exactly there when the steps push
    it there: they do not determine it), each with a note."""
    return {name: f" (at the {'lower' if getattr(calibration, name) == lower else 'upper'} bound of its range)"
            for name, (lower, upper) in ROOFLINE_BOUNDS.items() if getattr(calibration, name) in (lower, upper)}


def _sources(seen: Provenance) -> dict[str, str]:
    """Where each constant of the stack's file comes from."""
    roofline = f"least squares over {seen.num_roofline_steps:,} busy steps of the cells without a connector"
    sources = {name: roofline if index == 0 else "the same fit" for index, name in enumerate(ROOFLINE_BOUNDS)}
    return sources | {
        "request_overhead_s": f"mean job times of the {seen.num_overhead_cells} cells without a connector",
        "lmcache_save_step_s": "0: LMCache's work is lmcache_prompt_step_s and its stores and retrieves",
        "lmcache_save_chunk_s": "0, as above",
        "lmcache_prompt_step_s": "its traces beyond the roofline and its logged work",
        "lmcache_store_s": f"its log: {seen.num_lmcache_stores:,} stores, fixed part",
        "lmcache_store_chunk_s": "per 256-token chunk",
        "lmcache_retrieve_s": f"its log: {seen.num_lmcache_retrieves:,} retrieves, fixed part",
        "lmcache_retrieve_chunk_s": "per 256-token chunk",
        "native_load_job_s": f"mean job times of the {seen.num_native_cells} native-offload cells",
        "simple_store_s": f"mean job times of the {seen.num_simple_cells} simple-offload cells",
    }  # fmt: skip


def stack_toml(calibration: Calibration, seen: Provenance, errors: dict[str, float], name: str, command: str) -> str:
    """The stack's file (``stacks.py`` reads it): its provenance (``[stack]``: the runs, GPU types and cells it was
    fitted on, and ``command``, which wrote it), every constant with where it came from (``[calibration]``, what
    ``Calibration.load`` reads) and each policy's error on runs left out (``[held_out]``, ``held_out_errors``)."""
    bounds = at_bounds(calibration)
    lines = [f"# The simulator's constants for the engine stack {name}, fitted on {seen.num_cells} GPU cells of "
             f"{len(seen.runs)} runs (docs/gpu-runs)", f"# by `{command}`: never edited by hand.",
             "# orchestrator/sim/stack_fit.py says how each stage fits its constants.", "", "[stack]",
             f"name = {json.dumps(name)}", f"command = {json.dumps(command)}", f"runs = {json.dumps(list(seen.runs))}",
             f"gpus = {json.dumps(list(seen.gpus))}", f"num_cells = {seen.num_cells}",
             f"num_roofline_steps = {seen.num_roofline_steps}",
             f"num_lmcache_stores = {seen.num_lmcache_stores}", f"num_lmcache_retrieves = {seen.num_lmcache_retrieves}",
             "", "[calibration]"]  # fmt: skip
    lines += [f"{key} = {getattr(calibration, key):.6g}  # {source}{bounds.get(key, '')}"
              for key, source in _sources(seen).items()]  # fmt: skip
    lines += ["", "# Per policy: the RMS relative error of mean JCT, each cell predicted by a fit without its run",
              "[held_out]", *(f'"{policy}" = {error:.4f}' for policy, error in sorted(errors.items()))]  # fmt: skip
    return "\n".join(lines) + "\n"
