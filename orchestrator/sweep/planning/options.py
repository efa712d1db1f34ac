"""How one run of a sweep behaves (where results and tracking go, dry run, progress, scale-up), apart from
what it measures (``spec.SweepSpec``); the flags of ``cli.sweep`` take their defaults from here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.budget.gpu_budget import GpuBudget
from orchestrator.records.slo import Slo


@dataclass(frozen=True)
class SweepOptions:
    results_dir: Path
    tracking_uri: str
    dry_run: bool = False
    rerun: bool = False
    ray_address: str | None = None
    progress_interval_s: float = 10.0
    live: bool | None = None  # None: live display when stdout is a terminal
    scale_up_timeout_s: float = 1800.0  # wait this long for a first node of a launchable type
    autoscaler_config: Path | None = None  # the cluster YAML, where the autoscaler publishes none
    tracking_patience_s: float = 300.0  # how long the tracking store may not answer before the sweep stops
    slo: Slo | None = None  # each done cell is judged against it (records/slo.py): met, goodput
    report: bool = True  # the HTML report at the end; a search running many rounds builds it once, last
    gpu_budget: GpuBudget | None = None  # predict every cell, then measure in the order that matters (runtime.budgeted)
