"""What a cell costs in device time, before it runs and as a run learns (pure but for reading the shipped table).

    cost = start (where the cell needs a new server) + load + reset

- start: per place a server runs (a GPU type, ``cpu``, ``fake``), the measured starts the project ships
  (``data/starts.toml``: the first start on a fresh machine and a later one, and what a CPU tier adds). Once a run
  has started a server of a place, the latest start measured there, with a fifth more, replaces them.
- load: the arrival window and the tail of the last jobs: the simulator's predicted span of the cell (first arrival
  to last job's end) where it has a prediction, else the window and a generous turn per turn. Once cells of a place
  are measured, scaled by how their measured loads compared with the estimate.
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
        self._latest_start_s: dict[tuple[str, bool], float] = {}
        self._started: set[str] = set()  # places where a server has started (or a plan has one start)
        self._load_ratios: dict[str, list[float]] = {}

    def shipped(self, place: str) -> StartTimes:
        """The place's row, or for a GPU type without one the slowest GPU row (an upper-leaning guess)."""
        if place in self.starts:
            return self.starts[place]
        gpus = [row for name, row in self.starts.items() if name not in (CPU, FAKE_PLACE)]
        return max(gpus, key=lambda row: row.first_s)

    def start_s(self, place: str, tiered: bool) -> float:
        """The next start at ``place`` (of a policy with a CPU tier where ``tiered``): the first there, or a later
        one once a server has started (or a plan has one start) there."""
        first = not self.has_started(place)
        row = self.shipped(place)
        extra = row.tier_extra_s if tiered else 0.0
        if (latest := self._latest_start_s.get((place, tiered))) is not None:
            return latest * START_SLACK
        if (other := self._latest_start_s.get((place, not tiered))) is not None:
            return other * START_SLACK + extra
        if first and place in self._first_start_s:
            return self._first_start_s[place] + extra
        return (row.first_s if first else row.later_s) + extra

    def has_started(self, place: str) -> bool:
        return place in self._started

    def mark_started(self, place: str) -> None:
        """A server starts at ``place``: the next start there is a later one."""
        self._started.add(place)

    def record_start(self, place: str, tiered: bool, seconds: float) -> None:
        self._latest_start_s[(place, tiered)] = seconds
        self._started.add(place)

    def load_s(self, place: str, workload: WorkloadSpec, device: str, predicted_span_s: float | None) -> float:
        """A cell's load at ``place``: its predicted span (else the generous guess), scaled by the place's
        measured loads against their estimates."""
        base = base_load_s(workload, device, predicted_span_s)
        ratios = self._load_ratios.get(place)
        return base * max(MIN_LOAD_RATIO, statistics.median(ratios)) if ratios else base

    def record_load(self, place: str, measured_s: float, estimated_base_s: float) -> None:
        """A measured cell's load (its wall time less its start and reset) against the unscaled estimate."""
        if estimated_base_s > 0:
            self._load_ratios.setdefault(place, []).append(measured_s / estimated_base_s)

    def cell_s(self, place: str, workload: WorkloadSpec, device: str, predicted_span_s: float | None, *,
               tiered: bool, needs_start: bool) -> float:  # fmt: skip
        start = self.start_s(place, tiered) if needs_start else 0.0
        return start + self.load_s(place, workload, device, predicted_span_s) + self.shipped(place).reset_s
