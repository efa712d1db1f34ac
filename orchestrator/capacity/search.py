"""The capacity search run as sweeps: per GPU type, the crossover's bisection (``crossover.bisection``) over load
with a judge that says, for every arm at once, whether it meets the SLO with confidence; with ``confirm``, each
simulated capacity measured on real vLLM at itself and ``CONFIRM_ABOVE`` times it (walking where the measurement
disagrees); with a target traffic, the fewest replicas behind each router that meet the SLO there, simulated.
Every load and fleet checked is an ordinary cell of one sweep: tracked, resumable, in its report.

An arm's trials at a load are exactly the cells its round's grid expands to there (``planning.cells.expand``: a
cell's key covers its whole workload), so a cell of another workload in the same sweep directory never joins them;
each is read with the status the summary ends it with, and a failed or hung trial makes the load not met
(``plan.failure_of``), for the capacity and a fleet alike."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace

import pandas as pd

from orchestrator.capacity.plan import (
    CONFIRM_ABOVE,
    Arm,
    Capacity,
    LoadState,
    capacity_of,
    cost_per_thousand_jobs,
    failure_of,
    first_fleet_guess,  # fmt: skip
    fleet_size,
    lowest_judgeable_jps,
    next_fleet_size,
)
from orchestrator.cell.spec import CellSpec, EngineKind
from orchestrator.crossover.bisection import NOT_MEASURED, Flip, bisect_flips, locate_flip
from orchestrator.crossover.search import SearchRange, SearchRounds, publish_search_report
from orchestrator.gpus import CPU
from orchestrator.inputs.validation import InputError
from orchestrator.policies.catalog import POLICIES
from orchestrator.records.cell import CellStatus
from orchestrator.records.layout import SweepFiles
from orchestrator.records.names import read_summary
from orchestrator.records.slo import Met, Slo, SloOutcome, Trial, evaluate
from orchestrator.records.store import atomic_write_csv
from orchestrator.routing.rules import RouterKind
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.sweep.runtime.profiling import measure_cpu_profile

MET_LABEL, UNMET_LABEL = "met", "not met"


@dataclass(frozen=True)
class CapacityAsk:
    """What the user asked of the search beyond the sweep itself."""

    slo: Slo
    within: SearchRange
    confirm: bool = False  # measure each simulated capacity on real vLLM
    traffic_jps: float | None = None  # size a fleet for this load
    prices: tuple[tuple[str, float], ...] = ()  # per GPU-hour, by GPU type

    def price(self, gpu: str) -> float | None:
        return dict(self.prices).get(gpu)


@dataclass(frozen=True)
class Judged:
    """How one arm fared at one load, and the SLO's outcome over its trials where it was judged (None where a trial
    failed or hung)."""

    state: LoadState
    outcome: SloOutcome | None


def run_capacity(spec: SweepSpec, options, engine: EngineKind, ask: CapacityAsk) -> int:
    """Every arm's capacity on every GPU type of ``spec``, confirmed and sized into fleets as ``ask`` says; writes
    ``capacity.csv`` (and ``fleet.csv``) in the sweep's directory and builds its report."""
    options = replace(options, slo=ask.slo)
    ask = _judgeable(spec, ask)
    if options.dry_run:
        return _dry_run(spec, options, engine, ask)
    files = SweepFiles(options.results_dir / spec.name)
    capacities, fleets = [], []
    with SearchRounds(options) as rounds:
        for gpu in spec.gpus:
            gpu_spec = _one_gpu(spec, gpu)
            if engine is EngineKind.SIM and gpu == CPU:
                gpu_spec = gpu_spec.model_copy(update={"cpu_profile": measure_cpu_profile(gpu_spec, options)})
                print(f"[{spec.name}] the CPU engine on this machine, as the simulator will run it: "
                      f"{gpu_spec.cpu_profile.describe()}")  # fmt: skip
            judge = SloJudge(gpu_spec, rounds, engine)
            within = ask.within
            bisect_flips(judge.labels, within.jps_min, within.jps_max, within.resolution)
            for arm in judge.arms:
                capacity = capacity_of(judge.state_by_load(arm))
                row = _capacity_row(arm, capacity, judge, engine, ask)
                if ask.confirm and engine is EngineKind.SIM and capacity.jps is not None:
                    row |= _confirm(gpu_spec, rounds, arm, capacity, within)
                capacities.append(row)
                if ask.traffic_jps is not None and capacity.jps is not None and arm.router is None:
                    fleets += [_fleet(gpu_spec, rounds, arm, capacity, router, ask) for router in spec.routers]
            atomic_write_csv(pd.DataFrame(capacities), files.capacity)  # each GPU type's answers kept as they come
            if fleets:
                atomic_write_csv(pd.DataFrame(fleets), files.fleet)
    publish_search_report(spec.name, options)
    _print(spec.name, ask, pd.DataFrame(capacities), pd.DataFrame(fleets))
    return 0


class SloJudge:
    """How each arm of one GPU type's sweep fares at the loads asked: each call runs the sweep with every load asked so
    far (done cells are skipped) and judges each arm at the loads asked over its own cells there, its trials pooled
    (module docstring). Policies without a CPU tier are run at one DRAM budget only (the largest): the others do not
    change them."""

    def __init__(self, spec: SweepSpec, rounds: SearchRounds, engine: EngineKind):
        self.spec, self.rounds, self.engine = spec, rounds, engine
        self.files = SweepFiles(rounds.options.results_dir / spec.name)
        self.grids = _grids(spec)
        gpu = spec.gpus[0]
        self.arms = [Arm(gpu, policy, dram, tp, replicas, router.value if router else None) for grid in self.grids
                     for policy in grid.policies for dram in grid.dram_for(gpu) for tp in grid.tp_for(gpu)
                     for replicas, router in grid.replica_setups()]  # fmt: skip
        self.judged: dict[tuple[Arm, float], Judged] = {}
        self._asked: set[float] = set()

    def labels(self, loads: list[float]) -> dict[float, str]:
        """Per load, every arm's met or not met in one label: a change of any arm's is a change the bisection
        narrows."""
        self.judge(loads)
        return {load: ", ".join(f"{arm.label} {self.label(arm, load)}" for arm in self.arms) for load in loads}

    def judge(self, loads: list[float]) -> None:
        self._asked.update(loads)
        print(f"[{self.spec.name}] judging {self.spec.gpus[0]} on {self.engine.value} at "
              f"{', '.join(f'{jps:g}' for jps in loads)} jobs per second", flush=True)  # fmt: skip
        trials: dict[tuple[Arm, float], list[tuple[CellSpec, str]]] = defaultdict(list)
        for grid in self.grids:
            asked = grid.model_copy(update={"engine": self.engine, "jps": tuple(sorted(self._asked))})
            for cell, status in _run_cells(self.rounds, asked):
                if cell.jps in loads:
                    trials[(_arm_of(cell), cell.jps)].append((cell, status))
        for arm_load, cells in trials.items():
            if (judged := _judged(self.files, cells, self.rounds.options.slo)) is not None:
                self.judged[arm_load] = judged

    def label(self, arm: Arm, load: float) -> str:
        judged = self.judged.get((arm, load))
        if judged is None or not judged.state.is_judged:
            return NOT_MEASURED
        return MET_LABEL if judged.state.is_met else UNMET_LABEL

    def state_in_words(self, arm: Arm, load: float) -> str:
        """Met, missed, unsure, failed or hung, or not measured."""
        judged = self.judged.get((arm, load))
        return judged.state.value if judged else NOT_MEASURED

    def state_by_load(self, arm: Arm) -> dict[float, LoadState]:
        return {load: judged.state for (of, load), judged in self.judged.items() if of == arm}


def _confirm(spec: SweepSpec, rounds: SearchRounds, arm: Arm, capacity: Capacity, within: SearchRange) -> dict:
    """The simulated ``capacity`` of ``arm`` measured on real vLLM at itself and ``CONFIRM_ABOVE`` times it; where
    either disagrees, the walk and bisection of ``locate_flip`` find the measured capacity (to a quarter of it), and
    ``CONFIRM_ABOVE`` times that is measured too: the measured capacity is met there and not above."""
    measure = SloJudge(_one_arm(spec, arm), rounds, EngineKind.VLLM)

    def judge(loads: list[float]) -> dict[float, str]:
        measure.judge(loads)
        return {load: measure.label(arm, load) for load in loads}

    above = round(capacity.jps * CONFIRM_ABOVE, 3)
    locate_flip(judge, Flip(capacity.jps, above, MET_LABEL, UNMET_LABEL), within.jps_min, within.jps_max,
                resolution=capacity.jps * (CONFIRM_ABOVE - 1))  # fmt: skip
    measured = capacity_of(measure.state_by_load(arm))
    row = {"vllm_at_capacity": measure.state_in_words(arm, capacity.jps), "vllm_at_above": measure.state_in_words(arm, above),
           "above_jps": above, **_capacity_columns(measured, "vllm_")}  # fmt: skip
    if measured.jps is not None:
        measured_above = round(measured.jps * CONFIRM_ABOVE, 3)
        if (arm, measured_above) not in measure.judged:
            measure.judge([measured_above])
        row |= {"vllm_at_measured_capacity": measure.state_in_words(arm, measured.jps),
                "vllm_measured_above_jps": measured_above,
                "vllm_at_measured_above": measure.state_in_words(arm, measured_above)}  # fmt: skip
    return row


def _fleet(spec: SweepSpec, rounds: SearchRounds, arm: Arm, capacity: Capacity, router: RouterKind,
           ask: CapacityAsk) -> dict:  # fmt: skip
    """The fewest replicas of ``arm`` behind ``router`` that meet the SLO at the target traffic, each size checked
    by simulating it (``plan.next_fleet_size``), starting from the capacity's guess."""
    target = ask.traffic_jps
    guess = first_fleet_guess(target, capacity.jps)
    options = rounds.options
    files = SweepFiles(options.results_dir / spec.name)
    met_by_size: dict[int, bool] = {}
    judged: dict[int, Judged | None] = {}
    while (size := next_fleet_size(met_by_size, guess)) is not None:
        fleet = _one_arm(spec, arm).model_copy(update={
            "engine": EngineKind.SIM, "jps": (target,), "replicas": (size,), "routers": (router,)})  # fmt: skip
        print(f"[{spec.name}] {arm.gpu} {arm.label}: {size} replica(s) behind {router.value} at {target:g} JPS, "
              "simulated", flush=True)  # fmt: skip
        judged[size] = _judged(files, _run_cells(rounds, fleet), options.slo)
        met_by_size[size] = judged[size] is not None and judged[size].state.is_met
    size = fleet_size(met_by_size)
    price = ask.price(arm.gpu)
    row = {"gpu": arm.gpu, "policy": arm.policy, "dram_gb": arm.dram_gb, "tp": arm.tp, "router": router.value,
           "slo": str(options.slo), "target_jps": target, "capacity_jps": capacity.jps, "first_guess": guess,
           "replicas": size, "gpus": size * arm.tp if size else None,
           "checked": "; ".join(f"{n}: {judged[n].state.value if judged[n] else NOT_MEASURED}" for n in sorted(judged)),
           "engine": EngineKind.SIM.value}  # fmt: skip
    if size:
        row |= _goodput_columns(judged[size].outcome, target)
        if price:
            row["cost_per_1k_jobs"] = cost_per_thousand_jobs(price, size * arm.tp, target)
    return row


def _capacity_row(arm: Arm, capacity: Capacity, judge: SloJudge, engine: EngineKind, ask: CapacityAsk) -> dict:
    row = {"gpu": arm.gpu, "policy": arm.policy, "dram_gb": arm.dram_gb, "tp": arm.tp, "replicas": arm.replicas,
           "router": arm.router, "gpus": arm.gpus, "engine": engine.value,
           "slo": str(ask.slo), **_capacity_columns(capacity),
           "loads_judged": len(judge.state_by_load(arm))}  # fmt: skip
    outcome = judge.judged[(arm, capacity.jps)].outcome if capacity.jps is not None else None
    if outcome is not None:
        row |= _goodput_columns(outcome, capacity.jps)
        for target in outcome.targets:
            row |= {f"{target.target.name}_s": target.value.estimate, f"{target.target.name}_lo_s": target.value.lo,
                    f"{target.target.name}_hi_s": target.value.hi}  # fmt: skip
        price = ask.price(arm.gpu)
        if price:
            row["cost_per_1k_jobs"] = cost_per_thousand_jobs(price, arm.gpus, capacity.jps)
    return row


def _capacity_columns(capacity: Capacity, prefix: str = "") -> dict:
    """A capacity as capacity.csv's columns: the load met, the first not met, how the arm fared there (met, missed,
    unsure, failed or hung) and the loads met above it ("; "-separated, empty where the states were monotone)."""
    above = "; ".join(f"{jps:g}" for jps in capacity.non_monotone_jps)
    return {f"{prefix}capacity_jps": capacity.jps, f"{prefix}first_unmet_jps": capacity.first_unmet_jps,
            f"{prefix}at_first_unmet": capacity.first_unmet.value if capacity.first_unmet else None,
            f"{prefix}non_monotone_jps": above or None,
            f"{prefix}too_few_jobs_jps": "; ".join(f"{jps:g}" for jps in capacity.too_few_jobs_jps) or None}  # fmt: skip


def _judgeable(spec: SweepSpec, ask: CapacityAsk) -> CapacityAsk:
    """``ask`` with the search starting no lower than the lowest load whose cells have jobs enough to bound the SLO's
    percentiles (``plan.lowest_judgeable_jps``): below it no load can be met, and searching there would only bisect
    towards it. Says so in one line where it moves the start; refuses a range with no such load."""
    window_s, trials = spec.workload.arrival_window_s, len(spec.cell_seeds())
    lowest = lowest_judgeable_jps(ask.slo, window_s, trials)
    within = ask.within
    if lowest is None or lowest <= within.jps_min:
        return ask
    why = (f"a cell of {trials} trial(s) over a {window_s:g} s window has enough jobs to bound {ask.slo}'s percentiles "
           f"from about {lowest:.3g} JPS (docs/capacity.md: how many jobs a cell needs); a longer --duration-s or more "
           "--trials lower it")  # fmt: skip
    if lowest >= within.jps_max:
        raise InputError(f"--jps-max {within.jps_max:g}: no load searched can meet the SLO: {why}")
    start = math.ceil(lowest * 1000) / 1000
    print(f"[{spec.name}] note: the search starts at {start:g} JPS, not {within.jps_min:g}: {why}", flush=True)
    return replace(ask, within=SearchRange(start, within.jps_max, within.resolution))


def _goodput_columns(outcome: SloOutcome, jps: float) -> dict:
    goodput = outcome.goodput_jps(jps)
    return {"goodput_jps": goodput.estimate, "goodput_lo_jps": goodput.lo, "goodput_hi_jps": goodput.hi}


def _grids(spec: SweepSpec) -> list[SweepSpec]:
    """``spec`` as the sweeps that cover its arms: policies whose CPU tier is the DRAM budget over every budget,
    the others at the largest budget alone."""
    gpu = spec.gpus[0]
    budgets = spec.dram_for(gpu)
    tiered = tuple(policy for policy in spec.policies if POLICIES[policy].tier_is_the_budget)
    untiered = tuple(policy for policy in spec.policies if policy not in tiered)
    grids = []
    if untiered:
        grids.append(spec.model_copy(update={"policies": untiered, "dram_gb": (max(budgets),), "dram_gb_by_gpu": {}}))
    if tiered:
        grids.append(spec.model_copy(update={"policies": tiered}))
    return grids


def _one_gpu(spec: SweepSpec, gpu: str) -> SweepSpec:
    return spec.model_copy(update={"gpus": (gpu,), "dram_gb": spec.dram_for(gpu), "dram_gb_by_gpu": {}})


def _one_arm(spec: SweepSpec, arm: Arm) -> SweepSpec:
    """``spec``'s grid narrowed to ``arm`` (a lone replica through Serve is the serve-overhead setup)."""
    routed = {"replicas": (arm.replicas,), "serve_overhead": arm.router is not None and arm.replicas == 1}
    if arm.router is not None and arm.replicas > 1:
        routed["routers"] = (RouterKind(arm.router),)
    return spec.model_copy(update={"policies": (arm.policy,), "dram_gb": (arm.dram_gb,), "dram_gb_by_gpu": {},
                                   "tp": (arm.tp,), **routed})  # fmt: skip


def _run_cells(rounds: SearchRounds, grid: SweepSpec) -> list[tuple[CellSpec, str]]:
    """Every cell of ``grid`` with the status its summary row ends with, once the round has run it (done cells are
    skipped). Read at once: the summary keeps the done cells of every grid run, but the others only of the last."""
    rounds.run(grid)
    files = SweepFiles(rounds.options.results_dir / grid.name)
    status = read_summary(files.summary, ["cell_key", "status"]).set_index("cell_key").status
    return [(cell, status.get(cell.key, CellStatus.NOT_RUN.value)) for cell in expand(grid)]


def _arm_of(cell: CellSpec) -> Arm:
    return Arm(cell.gpu, cell.policy, cell.dram_gb, cell.tp, cell.replicas, cell.router.value if cell.router else None)


def _judged(files: SweepFiles, cells: list[tuple[CellSpec, str]], slo: Slo) -> Judged | None:
    """How one arm fared at one load over its ``cells`` (its trials, each with its status): failed or hung where a
    trial ended so, else ``slo`` judged over the done trials, with its outcome; None when none is done."""
    if (failure := failure_of(status for _, status in cells)) is not None:
        return Judged(failure, None)
    done = [cell.key for cell, status in cells if status == CellStatus.DONE.value]
    if not done:
        return None
    trials = [Trial.of_frames(pd.read_parquet(files.cell(key).jobs), pd.read_parquet(files.cell(key).requests))
              for key in done]  # fmt: skip
    return _judged_over(trials, slo)


def _judged_over(trials: list[Trial], slo: Slo) -> Judged:
    """``slo`` judged over ``trials``: met, missed or unsure, or too few jobs where only that leaves it unsure."""
    outcome = evaluate(slo, trials)
    unsure = [target for target in outcome.targets if target.met is Met.UNSURE]
    if unsure and outcome.met is Met.UNSURE and all(target.jobs_needed is not None for target in unsure):
        return Judged(LoadState.TOO_FEW_JOBS, outcome)  # no verdict either way: more jobs would tell
    return Judged(LoadState(outcome.met.value), outcome)


def _dry_run(spec: SweepSpec, options, engine: EngineKind, ask: CapacityAsk) -> int:
    """The grids the search starts from, per GPU type; the loads after them depend on the verdicts there."""
    from orchestrator.crossover.bisection import start_loads
    from orchestrator.sweep.runtime.driver import run_sweep

    loads = tuple(start_loads(ask.within.jps_min, ask.within.jps_max))
    for gpu in spec.gpus:
        for grid in _grids(_one_gpu(spec, gpu)):
            run_sweep(grid.model_copy(update={"engine": engine, "jps": loads}), options)
    print(f"[{spec.name}] dry run: the search then halves every interval where an arm goes from meeting {ask.slo} "
          f"to not, until it is at most {ask.within.resolution:g} JPS wide"
          + (f"; then confirms each capacity on real vLLM at it and {CONFIRM_ABOVE:g}x it" if ask.confirm else "")
          + (f"; then sizes a fleet for {ask.traffic_jps:g} JPS, simulated" if ask.traffic_jps else ""))  # fmt: skip
    return 0


def _print(sweep: str, ask: CapacityAsk, capacities: pd.DataFrame, fleets: pd.DataFrame) -> None:
    shown = [column for column in ("gpu", "policy", "dram_gb", "replicas", "router", "engine", "capacity_jps",
                                   "first_unmet_jps", "at_first_unmet", "non_monotone_jps", "too_few_jobs_jps", "goodput_jps",
                                   "cost_per_1k_jobs", "vllm_at_capacity", "vllm_at_above", "vllm_capacity_jps",
                                   "vllm_at_measured_above") if column in capacities]  # fmt: skip
    print(f"[{sweep}] capacity at {ask.slo} (the highest load met with confidence; first_unmet_jps: the next load "
          "searched, which was not, and at_first_unmet how; non_monotone_jps: loads met above it; too_few_jobs_jps: "
          "loads whose jobs could not bound the SLO's percentiles, left out):")  # fmt: skip
    print(capacities[shown].to_string(index=False))
    if len(fleets):
        shown = [column for column in ("gpu", "policy", "dram_gb", "router", "target_jps", "first_guess", "replicas",
                                       "gpus", "cost_per_1k_jobs", "checked") if column in fleets]  # fmt: skip
        print(f"[{sweep}] replicas needed for {ask.traffic_jps:g} JPS at {ask.slo}, simulated:")
        print(fleets[shown].to_string(index=False))
