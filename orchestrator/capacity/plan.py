"""Capacity, fleet sizes and cost (pure): what the capacity search reads from the loads it judged, which fleet size
to check next, and what a thousand jobs cost at a price per GPU-hour.

Capacity. An arm (a policy at a DRAM budget on a GPU type) is judged at each load the search asks (``LoadState``):
it meets the SLO with confidence, misses it or is unsure (``records.slo``), or a trial of it failed or hung, which is
not met either: a policy whose cells crash under a load does not carry it. Its capacity is the highest load met,
walking up from the lowest load judged, before the first load not met; the true capacity lies between the two, which
is the interval reported. That assumes meeting the SLO is monotone in load (met up to a knee, not met past it). A load
met above one not met (a lucky draw of jobs past the knee, or a failure below it) does not raise the capacity: it is
reported as a break of that assumption (``Capacity.non_monotone_jps``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.inputs.validation import InputError
from orchestrator.records.cell import CellStatus
from orchestrator.records.intervals import num_needed
from orchestrator.records.slo import Slo

# How far above a capacity its confirmation measures: a load this much higher must not meet the SLO.
CONFIRM_ABOVE = 1.25
# The capacity search starts where its cells expect this many times the jobs a percentile needs: a Poisson count of
# 54 expected jobs falls below 36 (a p90's) about once in 200 draws, of 36 expected about half the time.
JOBS_MARGIN = 1.5
# A fleet is looked for up to this many times the first guess (and 4 replicas more).
FLEET_GUESS_FACTOR = 4


@dataclass(frozen=True)
class Arm:
    """What one capacity is found for: a policy at a DRAM budget on a GPU type, its replicas of ``tp`` GPUs each
    behind a router or one replica alone."""

    gpu: str
    policy: str
    dram_gb: float
    tp: int = 1
    replicas: int = 1
    router: str | None = None  # in front of the replicas; None: one replica, talked to directly

    @property
    def label(self) -> str:
        routed = f" x{self.replicas} {self.router}" if self.router else ""
        return f"{self.policy}@{self.dram_gb:g}GiB{routed}"

    @property
    def gpus(self) -> int:
        return self.tp * self.replicas


class LoadState(str, enum.Enum):
    """How an arm fared at one load: the SLO's judgement of its trials (``records.slo.Met``'s values), or how a trial
    ended that left no records to judge."""

    MET = "met"
    MISSED = "missed"
    UNSURE = "unsure"
    FAILED = "failed"  # a trial failed (its replica did not start, its engine crashed, ...)
    HUNG = "hung"  # a trial stopped making progress
    TOO_FEW_JOBS = "too few jobs"  # unsure only because its jobs cannot bound a percentile: no verdict either way

    @property
    def is_met(self) -> bool:
        return self is LoadState.MET

    @property
    def is_judged(self) -> bool:
        """Whether the load says anything of the capacity: one with too few jobs does not."""
        return self is not LoadState.TOO_FEW_JOBS


def failure_of(statuses: Iterable[str]) -> LoadState | None:
    """FAILED where any of an arm's trials at a load ended failed, else HUNG where any hung (``CellStatus`` values, as
    the summary's last status of each), else None: its done trials are then the SLO's to judge."""
    ended = set(statuses)
    for state, status in ((LoadState.FAILED, CellStatus.FAILED), (LoadState.HUNG, CellStatus.HUNG)):
        if status.value in ended:
            return state
    return None


@dataclass(frozen=True)
class Capacity:
    """The highest load met before the first not met (None: not met even at the lowest load judged), that first load
    not met (None: met up to the highest load judged) and how the arm fared there, and every load met above it (empty
    where meeting the SLO was monotone in load, as the capacity assumes)."""

    jps: float | None
    first_unmet_jps: float | None
    first_unmet: LoadState | None
    non_monotone_jps: tuple[float, ...]
    too_few_jobs_jps: tuple[float, ...] = ()  # loads left out: their jobs could not bound the SLO's percentiles

    def in_words(self) -> str:
        if self.first_unmet_jps is None:
            said = (f"at least {self.jps:g} JPS (met at every load searched)" if self.jps is not None
                    else "not judged (too few jobs at every load searched)")  # fmt: skip
        else:
            unmet = f"{self.first_unmet.value} at {self.first_unmet_jps:g}"
            said = f"below {self.first_unmet_jps:g} JPS ({unmet})" if self.jps is None else f"{self.jps:g} JPS ({unmet})"
        if self.non_monotone_jps:
            again = ", ".join(f"{jps:g}" for jps in self.non_monotone_jps)
            said += f"; not monotone in load: met again at {again} JPS, above a load not met"
        if self.too_few_jobs_jps:
            said += f"; too few jobs to judge at {', '.join(f'{jps:g}' for jps in self.too_few_jobs_jps)} JPS"
        return said


def capacity_of(state_by_load: dict[float, LoadState]) -> Capacity:
    """The capacity that the states of one arm at each load give (module docstring); a load with too few jobs to judge
    is left out of it and listed."""
    too_few = tuple(sorted(load for load, state in state_by_load.items() if not state.is_judged))
    loads = sorted(load for load in state_by_load if load not in too_few)
    unmet = next((load for load in loads if not state_by_load[load].is_met), None)
    if unmet is None:
        return Capacity(loads[-1] if loads else None, None, None, (), too_few)
    below = [load for load in loads if load < unmet]
    again = tuple(load for load in loads if load > unmet and state_by_load[load].is_met)
    return Capacity(below[-1] if below else None, unmet, state_by_load[unmet], again, too_few)


def lowest_judgeable_jps(slo: Slo, window_s: float, trials: int) -> float | None:
    """The lowest load at which a cell of ``trials`` trials over a ``window_s`` arrival window expects ``JOBS_MARGIN``
    times the jobs that bound the strictest percentile of ``slo`` from above (``records.intervals.num_needed``): below
    it no load can be met, and near it a Poisson draw of jobs may still fall short. None where the SLO has no
    percentile."""
    needed = [num_needed(target.percentile) for target in slo.targets if target.percentile is not None]
    return JOBS_MARGIN * max(needed) / (window_s * trials) if needed else None


def next_fleet_size(met_by_size: dict[int, bool], first_guess: int) -> int | None:
    """The next number of replicas to check, or None when the smallest that meets the SLO is known (or none up to
    ``FLEET_GUESS_FACTOR`` times the guess does). Starts at the guess; steps down while the size below still meets
    it, up while it does not."""
    if not met_by_size:
        return first_guess
    meeting = [size for size, met in met_by_size.items() if met]
    if not meeting:
        largest = max(met_by_size)
        return largest + 1 if largest < most_replicas(first_guess) else None
    smallest = min(meeting)
    return None if smallest == 1 or smallest - 1 in met_by_size else smallest - 1


def most_replicas(first_guess: int) -> int:
    return FLEET_GUESS_FACTOR * first_guess + 4


def fleet_size(met_by_size: dict[int, bool]) -> int | None:
    """The fewest replicas checked that meet the SLO, None if none did."""
    return min((size for size, met in met_by_size.items() if met), default=None)


def first_fleet_guess(target_jps: float, capacity_jps: float) -> int:
    """Replicas at one replica's capacity each: a first guess only (routing and cross-replica reuse change it)."""
    return max(1, math.ceil(target_jps / capacity_jps - 1e-9))


def cost_per_thousand_jobs(price_per_gpu_hour: float, gpus: int, jps: float) -> float:
    """What a thousand jobs cost on ``gpus`` GPUs carrying ``jps`` jobs per second."""
    return price_per_gpu_hour * gpus / (jps * 3600) * 1000


def parse_prices(text: str, known: tuple[str, ...]) -> dict[str, float]:
    """``H100=2.49,H200=3.80`` (price per GPU-hour by GPU type) from ``--gpu-price``."""
    valid = f"valid: comma-separated TYPE=PRICE per GPU-hour, TYPE one of {', '.join(known)}; e.g. H100=2.49"
    prices = {}
    for part in (part.strip() for part in text.split(",") if part.strip()):
        gpu, _, price = part.partition("=")
        try:
            value = float(price)
        except ValueError:
            raise InputError(f"--gpu-price {text!r}: cannot read {part!r}; {valid}") from None
        if gpu not in known:
            raise InputError(f"--gpu-price {text!r}: {gpu!r} is not a GPU type of this search; {valid}")
        if not value > 0:
            raise InputError(f"--gpu-price {text!r}: the price of {gpu} must be positive; {valid}")
        prices[gpu] = value
    return prices
