"""The crossover search run as sweeps: each round of the bisection is one run of the search's sweep with
every load asked so far (those done are skipped), so the search is tracked and resumable like any sweep;
with ``confirm``, a simulated search's flips are then located on real vLLM."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from orchestrator.cell.spec import EngineKind
from orchestrator.crossover.bisection import NOT_MEASURED, Judge, bisect_flips, confirmation, locate_flip, start_loads
from orchestrator.gpus import CPU
from orchestrator.inputs.validation import InputError
from orchestrator.records.layout import SweepFiles
from orchestrator.records.names import read_summary
from orchestrator.records.store import atomic_write_csv
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.sweep.runtime.profiling import measure_cpu_profile, profile_spec


@dataclass(frozen=True)
class SearchRange:
    """Where the search looks, and how narrow each bracket it reports is (jobs per second)."""

    jps_min: float
    jps_max: float
    resolution: float

    def __post_init__(self):
        if not 0 < self.jps_min < self.jps_max or not self.resolution > 0:
            flags = f"--jps-min {self.jps_min:g} --jps-max {self.jps_max:g} --resolution {self.resolution:g}"
            raise InputError(f"{flags}: valid is 0 < jps-min < jps-max and a positive resolution")


def search_name(spec: SweepSpec) -> str:
    """The default sweep name of a search: one sweep per GPU type and pair of policies."""
    return f"crossover-{spec.gpus[0]}-{'-'.join(spec.policies)}"


def check_pair(spec: SweepSpec) -> None:
    if len(spec.gpus) != 1 or len(spec.policies) != 2:
        raise InputError(f"--gpu and --policies: one GPU type and two policies, got {', '.join(spec.gpus)} and "
                         f"{', '.join(spec.policies)}")  # fmt: skip


def run_search(spec: SweepSpec, options, engine: EngineKind, within: SearchRange, confirm: bool) -> int:
    """Search ``spec``'s pair of policies on its GPU type with ``engine`` (the simulator or real vLLM), and
    with ``confirm`` locate each simulated flip on real vLLM; writes ``crossover.csv`` and the report."""
    check_pair(spec)
    needs_profile = engine is EngineKind.SIM and spec.gpus == (CPU,)
    if options.dry_run:
        return _dry_run(spec, options, engine, needs_profile, start_loads(within.jps_min, within.jps_max))
    if needs_profile:
        spec = spec.model_copy(update={"cpu_profile": measure_cpu_profile(spec, options)})
        print(f"[{spec.name}] the CPU engine on this machine, as the simulator will run it: "
              f"{spec.cpu_profile.describe()}")  # fmt: skip
    SweepSpec.model_validate(spec.model_copy(update={"engine": engine}).model_dump())  # can the engine run the GPU?
    with SearchRounds(options) as rounds:
        flips = bisect_flips(sweep_judge(spec, options, engine, rounds), within.jps_min, within.jps_max,
                             within.resolution)  # fmt: skip
        rows = [{"jps_below": flip.jps_below, "jps_above": flip.jps_above, f"{engine.value}_below": flip.below,
                 f"{engine.value}_above": flip.above} for flip in flips]  # fmt: skip
        if confirm and engine is EngineKind.SIM and flips:
            measure = sweep_judge(spec, options, EngineKind.VLLM, rounds)
            for row, flip in zip(rows, flips):
                row |= confirmation(*locate_flip(measure, flip, within.jps_min, within.jps_max, within.resolution),
                                    flip)  # fmt: skip
    table = pd.DataFrame(rows)
    atomic_write_csv(table, SweepFiles(options.results_dir / spec.name).crossover)
    publish_search_report(spec.name, options)
    print(f"[{spec.name}] {len(flips)} change(s) of verdict between {within.jps_min:g} and {within.jps_max:g} jobs "
          "per second:")  # fmt: skip
    print(table.to_string(index=False) if len(table) else "  none: the same verdict at every load searched")
    return 0


def sweep_judge(spec: SweepSpec, options, engine: EngineKind, rounds: SearchRounds) -> Judge:
    """Verdicts from measuring: each call runs the sweep with every load asked so far (those done are
    skipped) and reads the verdict of each load asked from the sweep's results."""
    from orchestrator.analysis.load import cell_records, sim_errors
    from orchestrator.analysis.verdicts import verdicts

    asked: set[float] = set()
    files = SweepFiles(options.results_dir / spec.name)

    def judge(loads: list[float]) -> dict[float, str]:
        asked.update(loads)
        print(f"[{spec.name}] measuring {engine.value} at {', '.join(f'{jps:g}' for jps in loads)} jobs per second",
              flush=True)  # fmt: skip
        rounds.run(spec.model_copy(update={"engine": engine, "jps": tuple(sorted(asked))}))
        summary = read_summary(files.summary)
        found, _ = verdicts(summary[summary.engine == engine.value], cell_records(files), sim_errors(summary))
        by_load = {verdict.jps: verdict.label for verdict in found}
        return {jps: by_load.get(jps, NOT_MEASURED) for jps in loads}

    return judge


class SearchRounds:
    """A search's rounds: each runs its sweep with the loads asked so far (done cells are skipped). Rounds after the
    first go on with one tracker, which keeps the sweep's cell runs in memory instead of reading every run back from
    the store each round (a cost that grows with the sweep), and with the workers the round before left, whose
    replicas a cell of the same server configuration takes after a proven reset instead of starting its own. Use it
    in a ``with`` block: leaving it ends those workers."""

    def __init__(self, options):
        from orchestrator.sweep.runtime.driver import KeptWorkers

        self.options = options
        self._tracker = None
        self._workers = KeptWorkers()

    def __enter__(self) -> SearchRounds:
        return self

    def __exit__(self, *exc) -> None:
        self._workers.close()

    def run(self, spec: SweepSpec) -> None:
        from orchestrator.sweep.runtime.driver import EXIT_INTERRUPTED, open_tracker, run_sweep

        # No report per round: its plots cost more than a simulated round's cells. The search builds one at the end.
        if run_sweep(spec, replace(self.options, report=False), self._tracker, kept=self._workers) == EXIT_INTERRUPTED:
            raise SystemExit(EXIT_INTERRUPTED)  # stopped by a signal: so is the search; a re-run resumes it
        if self._tracker is None:
            self._tracker = open_tracker(spec, self.options)


def publish_search_report(sweep: str, options) -> None:
    """The sweep's report, built once the search is over (its rounds build none): every done cell, the rounds'
    and any confirmation's alike."""
    from orchestrator.sweep.runtime.driver import publish_report
    from orchestrator.sweep.runtime.results import SweepResults
    from orchestrator.sweep.runtime.tracking import SweepTracker

    publish_report(SweepResults(options.results_dir / sweep), SweepTracker.read_only(options.tracking_uri, sweep))


def _dry_run(spec: SweepSpec, options, engine: EngineKind, needs_profile: bool, loads: list[float]) -> int:
    """What the search would run first: the profiling cell (the CPU engine in the simulator), or the start
    loads; the loads after them depend on the verdicts measured there."""
    from orchestrator.sweep.runtime.driver import run_sweep

    first = profile_spec(spec) if needs_profile else spec.model_copy(update={"engine": engine, "jps": tuple(loads)})
    code = run_sweep(first, options)
    listed = ", ".join(f"{jps:g}" for jps in loads)
    start = f"the search starts at {listed} jobs per second and " if needs_profile else ""
    print(f"[{spec.name}] dry run: then {start}halves every interval whose two ends get different verdicts")
    return code
