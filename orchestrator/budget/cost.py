"""What a cell costs in device time, before it runs and as a run learns (pure but for reading the shipped table).

    cost = start (where the cell needs a new server) + load + reset

- start: per place a server runs (a GPU type, ``cpu``, ``fake``), the measured starts the project ships
  (``data/starts.toml``: the first start on a fresh machine and a later one, and what a CPU tier adds). A start is
  cold on a node where no server has started yet in the run (its compile cache and the model's inspection are cold)
  and warm on one where one has: the two are estimated apart, a cold one from the shipped first start, a warm one
  from the shipped later start, each replaced, once the run measured one of its kind at the place, by the latest so
  measured with a fifth more. A measured start is what the cell spent before its load (``start_spent_s``): the
  worker's checks, model and plan with the server's start, which on a worker's first cell is more than the start.
  A caller that does not know the node counts a start cold until a server has started at the place.
- load: the arrival window and the tail of the last jobs: the simulator's predicted span of the cell (first arrival
  to last job's end) where it has a prediction, else the window and a generous turn per turn. Once cells of a place
  are measured, scaled by the median of how their measured loads compared with the estimate (a cell stopped past
  its allowance counts with what it ran, at least its load).
- reset: after a cell, a reset and two canary requests prove the cache clean before the next cell reuses the
  server (per place, in the same table).

The sweep's budgeted runs and the GPU evidence run both spend by this model.
"""

from __future__ import annotations

import statistics
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.gpus import CPU
from orchestrator.workload.spec import WorkloadSpec

STARTS_FILE = Path(__file__).parents[1] / "data" / "starts.toml"
FAKE_PLACE = "fake"
START_SLACK = 1.2  # the next start against the latest one measured
TURN_S = {"gpu": 1.0, "cpu": 2.0}  # a generous turn of the source study's workload, queueing included
MIN_LOAD_RATIO = 0.25  # a place's measured loads never shrink an estimate below a quarter of the predicted span


@dataclass(frozen=True)
class StartTimes:
    """A place's measured server starts, in seconds."""

    first_s: float  # on a fresh machine: the compile cache and the model's inspection are cold
    later_s: float  # a later start of the same model on the machine
    tier_extra_s: float = 0.0  # what allocating and pinning a CPU tier adds
    reset_s: float = 10.0  # a reset proven clean between two cells on one server
    stack: str = ""
    source: str = ""


def load_starts(path: Path = STARTS_FILE) -> dict[str, StartTimes]:
    return {place: StartTimes(**row) for place, row in tomllib.loads(path.read_text()).items()}


def start_place(engine: str, gpu: str) -> str:
    """Where a cell's server starts, as the start table names it: the fake engine anywhere is ``fake``."""
    return FAKE_PLACE if engine == FAKE_PLACE else gpu


def start_spent_s(replica_start_s: float | None, setup_s: float | None) -> float | None:
    """What a cell that started its server spent before its load, as the model counts a start: the worker's setup
    (its checks, the model, the plan and the server's start), which a worker's first cell pays more of than its
    server's start alone; the server's start where the record has no setup (an older one). None: it started none."""
    if replica_start_s is None:
        return None
    return setup_s if setup_s is not None else replica_start_s


def base_load_s(workload: WorkloadSpec, device: str, predicted_span_s: float | None = None) -> float:
    """A cell's load before any measurement: its predicted span, else its window and, per turn, a tool call and a
    generous turn."""
    if predicted_span_s is not None:
        return predicted_span_s
    means = workload.mean_shape()
    return workload.arrival_window_s + means.turns * (means.tool_time_s + TURN_S[device])


class CostModel:
    """Estimates of what a cell costs, from the shipped starts and what the run measured since."""

    def __init__(self, starts: Mapping[str, StartTimes] | None = None, first_start_s: Mapping[str, float] | None = None):
        self.starts = dict(starts if starts is not None else load_starts())
        self._first_start_s = dict(first_start_s or {})  # a caller's better knowledge of a place's first start
        self._latest_start_s: dict[tuple[str, bool, bool], float] = {}  # by place, tiered, cold
        self._started: set[str] = set()  # places where a server has started (or a plan has one start)
        self._load_ratios: dict[str, list[float]] = {}

    def shipped(self, place: str) -> StartTimes:
        """The place's row, or for a GPU type without one the slowest GPU row (an upper-leaning guess)."""
        if place in self.starts:
            return self.starts[place]
        gpus = [row for name, row in self.starts.items() if name not in (CPU, FAKE_PLACE)]
        return max(gpus, key=lambda row: row.first_s)

    def start_s(self, place: str, tiered: bool, cold: bool | None = None) -> float:
        """The next start at ``place`` (of a policy with a CPU tier where ``tiered``), on a cold node or a warm one
        (None: cold until a server has started, or a plan has one start, at the place): the latest start of that
        kind measured there (of the other tiering, with the tier's allocation on top) with a fifth more, else for a
        cold one the caller's first start, else the shipped start of that kind."""
        cold = self.counts_cold(place, cold)
        row = self.shipped(place)
        extra = row.tier_extra_s if tiered else 0.0
        if (latest := self._latest_start_s.get((place, tiered, cold))) is not None:
            return latest * START_SLACK
        if (other := self._latest_start_s.get((place, not tiered, cold))) is not None:
            return other * START_SLACK + extra
        if cold and place in self._first_start_s:
            return self._first_start_s[place] + extra
        return (row.first_s if cold else row.later_s) + extra

    def has_started(self, place: str) -> bool:
        return place in self._started

    def mark_started(self, place: str) -> None:
        """A server starts at ``place``: where the node is not known, the next start there is a warm one."""
        self._started.add(place)

    def record_start(self, place: str, tiered: bool, seconds: float, cold: bool | None = None) -> None:
        """A start measured at ``place`` in ``seconds``, on a cold node or a warm one (None: as ``start_s``)."""
        self._latest_start_s[(place, tiered, self.counts_cold(place, cold))] = seconds
        self._started.add(place)

    def counts_cold(self, place: str, cold: bool | None) -> bool:
        """Whether a start at ``place`` counts as cold: as the caller says, else until one has started there."""
        return not self.has_started(place) if cold is None else cold

    def load_s(self, place: str, workload: WorkloadSpec, device: str, predicted_span_s: float | None) -> float:
        """A cell's load at ``place``: its predicted span (else the generous guess), scaled by the place's
        measured loads against their estimates."""
        base = base_load_s(workload, device, predicted_span_s)
        ratios = self._load_ratios.get(place)
        return base * max(MIN_LOAD_RATIO, statistics.median(ratios)) if ratios else base

    def record_load(self, place: str, measured_s: float, estimated_base_s: float) -> None:
        """A measured cell's load (its wall time less its start and reset) against the unscaled estimate; or, for a
        cell stopped before its end, what it ran, a lower bound: the median counts each ratio by its rank only, and a
        lower bound above the median ranks where the true load would."""
        if estimated_base_s > 0:
            self._load_ratios.setdefault(place, []).append(measured_s / estimated_base_s)

    def cell_s(self, place: str, workload: WorkloadSpec, device: str, predicted_span_s: float | None, *,
               tiered: bool, needs_start: bool, cold: bool | None = None) -> float:  # fmt: skip
        start = self.start_s(place, tiered, cold) if needs_start else 0.0
        return start + self.load_s(place, workload, device, predicted_span_s) + self.shipped(place).reset_s
