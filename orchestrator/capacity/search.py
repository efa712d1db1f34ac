"""The capacity search run as sweeps: per GPU type, the crossover's bisection (``crossover.bisection``) over load
with a judge that says, for every arm at once, whether it meets the SLO with confidence; with ``confirm``, each
simulated capacity measured on real vLLM at itself and ``CONFIRM_ABOVE`` times it (walking where the measurement
disagrees); with a target traffic, the fewest replicas behind each router that meet the SLO there, simulated.
Every load and fleet checked is an ordinary cell of one sweep: tracked, resumable, in its report."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from orchestrator.capacity.plan import (
    CONFIRM_ABOVE,
    Arm,
    Capacity,
    capacity_of,
    cost_per_thousand_jobs,
    first_fleet_guess,  # fmt: skip
    fleet_size,
    next_fleet_size,
)
from orchestrator.crossover.bisection import NOT_MEASURED, Flip, bisect_flips, locate_flip
from orchestrator.crossover.search import SearchRange, SearchRounds, publish_search_report
from orchestrator.gpus import CPU
from orchestrator.policies import POLICIES
from orchestrator.records.cell import CellStatus
from orchestrator.records.layout import SweepFiles
from orchestrator.records.names import read_summary
from orchestrator.records.slo import Met, Slo, SloOutcome, Trial, evaluate
from orchestrator.records.store import atomic_write_csv
from orchestrator.routing.rules import RouterKind
from orchestrator.sweep.planning.spec import EngineKind, SweepSpec
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


def run_capacity(spec: SweepSpec, options, engine: EngineKind, ask: CapacityAsk) -> int:
    """Every arm's capacity on every GPU type of ``spec``, confirmed and sized into fleets as ``ask`` says; writes
    ``capacity.csv`` (and ``fleet.csv``) in the sweep's directory and builds its report."""
    options = replace(options, slo=ask.slo)
    if options.dry_run:
        return _dry_run(spec, options, engine, ask)
    files = SweepFiles(options.results_dir / spec.name)
    rounds = SearchRounds(options)
    capacities, fleets = [], []
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
            capacity = capacity_of(judge.met_by_load(arm))
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
    """Whether each arm of one GPU type's sweep meets the SLO at the loads asked: each call runs the sweep with
    every load asked so far (done cells are skipped) and judges the cells of the loads asked, their trials pooled.
    Policies without a CPU tier are run at one DRAM budget only (the largest): the others do not change them."""

    def __init__(self, spec: SweepSpec, rounds: SearchRounds, engine: EngineKind):
        self.spec, self.rounds, self.engine = spec, rounds, engine
        self.files = SweepFiles(rounds.options.results_dir / spec.name)
        self.grids = _grids(spec)
        gpu = spec.gpus[0]
        self.arms = [Arm(gpu, policy, dram, tp, replicas, router.value if router else None) for grid in self.grids
                     for policy in grid.policies for dram in grid.dram_for(gpu) for tp in grid.tp_for(gpu)
                     for replicas, router in grid.replica_setups()]  # fmt: skip
        self.outcomes: dict[tuple[Arm, float], SloOutcome] = {}
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
        for grid in self.grids:
            self.rounds.run(grid.model_copy(update={"engine": self.engine, "jps": tuple(sorted(self._asked))}))
        done = _done_cells(self.files, self.engine, self.spec.gpus[0])
        for arm in self.arms:
            for load in loads:
                if (outcome := _judged(self.files, _of_arm(done, arm, load), self.rounds.options.slo)) is not None:
                    self.outcomes[(arm, load)] = outcome

    def label(self, arm: Arm, load: float) -> str:
        outcome = self.outcomes.get((arm, load))
        if outcome is None:
            return NOT_MEASURED
        return MET_LABEL if outcome.met is Met.MET else UNMET_LABEL

    def met_in_words(self, arm: Arm, load: float) -> str:
        """Met, missed or unsure, or not measured."""
        outcome = self.outcomes.get((arm, load))
        return outcome.met.value if outcome else NOT_MEASURED

    def met_by_load(self, arm: Arm) -> dict[float, Met]:
        return {load: outcome.met for (of, load), outcome in self.outcomes.items() if of == arm}


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
    measured = capacity_of(measure.met_by_load(arm))
    row = {"vllm_at_capacity": measure.met_in_words(arm, capacity.jps), "vllm_at_above": measure.met_in_words(arm, above),
           "above_jps": above, "vllm_capacity_jps": measured.jps, "vllm_first_unmet_jps": measured.first_unmet_jps}  # fmt: skip
    if measured.jps is not None:
        measured_above = round(measured.jps * CONFIRM_ABOVE, 3)
        if (arm, measured_above) not in measure.outcomes:
            measure.judge([measured_above])
        row |= {"vllm_at_measured_capacity": measure.met_in_words(arm, measured.jps),
                "vllm_measured_above_jps": measured_above,
                "vllm_at_measured_above": measure.met_in_words(arm, measured_above)}  # fmt: skip
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
    outcomes: dict[int, SloOutcome] = {}
    while (size := next_fleet_size(met_by_size, guess)) is not None:
        fleet = _one_arm(spec, arm).model_copy(update={
            "engine": EngineKind.SIM, "jps": (target,), "replicas": (size,), "routers": (router,)})  # fmt: skip
        print(f"[{spec.name}] {arm.gpu} {arm.label}: {size} replica(s) behind {router.value} at {target:g} JPS, "
              "simulated", flush=True)  # fmt: skip
        rounds.run(fleet)
        of_size = replace(arm, replicas=size, router=router.value if size > 1 else None)
        outcome = _judged(files, _of_arm(_done_cells(files, EngineKind.SIM, arm.gpu), of_size, target), options.slo)
        outcomes[size] = outcome
        met_by_size[size] = outcome is not None and outcome.met is Met.MET
    size = fleet_size(met_by_size)
    price = ask.price(arm.gpu)
    row = {"gpu": arm.gpu, "policy": arm.policy, "dram_gb": arm.dram_gb, "tp": arm.tp, "router": router.value,
           "slo": str(options.slo), "target_jps": target, "capacity_jps": capacity.jps, "first_guess": guess,
           "replicas": size, "gpus": size * arm.tp if size else None,
           "checked": "; ".join(f"{n}: {outcomes[n].met.value if outcomes[n] else NOT_MEASURED}" for n in sorted(outcomes)),
           "engine": EngineKind.SIM.value}  # fmt: skip
    if size:
        row |= _goodput_columns(outcomes[size], target)
        if price:
            row["cost_per_1k_jobs"] = cost_per_thousand_jobs(price, size * arm.tp, target)
    return row


def _capacity_row(arm: Arm, capacity: Capacity, judge: SloJudge, engine: EngineKind, ask: CapacityAsk) -> dict:
    row = {"gpu": arm.gpu, "policy": arm.policy, "dram_gb": arm.dram_gb, "tp": arm.tp, "replicas": arm.replicas,
           "router": arm.router, "gpus": arm.gpus, "engine": engine.value,
           "slo": str(ask.slo), "capacity_jps": capacity.jps, "first_unmet_jps": capacity.first_unmet_jps,
           "loads_judged": len(judge.met_by_load(arm))}  # fmt: skip
    outcome = judge.outcomes.get((arm, capacity.jps)) if capacity.jps is not None else None
    if outcome is not None:
        row |= _goodput_columns(outcome, capacity.jps)
        for target in outcome.targets:
            row |= {f"{target.target.name}_s": target.value.estimate, f"{target.target.name}_lo_s": target.value.lo,
                    f"{target.target.name}_hi_s": target.value.hi}  # fmt: skip
        price = ask.price(arm.gpu)
        if price:
            row["cost_per_1k_jobs"] = cost_per_thousand_jobs(price, arm.gpus, capacity.jps)
    return row


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


def _done_cells(files: SweepFiles, engine: EngineKind, gpu: str) -> pd.DataFrame:
    summary = read_summary(files.summary)
    done = summary[(summary.engine == engine.value) & (summary.gpu == gpu) & (summary.status == CellStatus.DONE.value)]
    return done.assign(tp=done.tp.fillna(1).astype(int) if "tp" in done else 1,
                       replicas=done.replicas.fillna(1).astype(int) if "replicas" in done else 1,
                       router=done.router if "router" in done else None)  # fmt: skip


def _of_arm(done: pd.DataFrame, arm: Arm, load: float) -> pd.DataFrame:
    router = done.router.isna() if arm.router is None else done.router == arm.router
    return done[(done.policy == arm.policy) & np.isclose(done.dram_gb, arm.dram_gb) & (done.tp == arm.tp)
                & (done.replicas == arm.replicas) & router & np.isclose(done.jps, load)]  # fmt: skip


def _judged(files: SweepFiles, cells: pd.DataFrame, slo: Slo) -> SloOutcome | None:
    """``slo`` judged over ``cells`` (one per trial), None when there are none."""
    if not len(cells):
        return None
    trials = [Trial.of_frames(pd.read_parquet(files.cell(key).jobs), pd.read_parquet(files.cell(key).requests))
              for key in cells.cell_key]  # fmt: skip
    return evaluate(slo, trials)


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
                                   "first_unmet_jps", "goodput_jps", "cost_per_1k_jobs", "vllm_at_capacity", "vllm_at_above",
                                   "vllm_capacity_jps", "vllm_at_measured_above") if column in capacities]  # fmt: skip
    print(f"[{sweep}] capacity at {ask.slo} (the highest load met with confidence; first_unmet_jps: the next load "
          "searched, which was not):")  # fmt: skip
    print(capacities[shown].to_string(index=False))
    if len(fleets):
        shown = [column for column in ("gpu", "policy", "dram_gb", "router", "target_jps", "first_guess", "replicas",
                                       "gpus", "cost_per_1k_jobs", "checked") if column in fleets]  # fmt: skip
        print(f"[{sweep}] replicas needed for {ask.traffic_jps:g} JPS at {ask.slo}, simulated:")
        print(fleets[shown].to_string(index=False))
