"""Every cell the project measured on a GPU, read back as the simulator needs it (reading only; nothing is written).

A GPU run is a dated folder of ``docs/gpu-runs`` (``<date>-<GPU>[-<what>]``). Its evidence calls (``call-N``) each
packed their cells into ``evidence.tar.xz``: under ``evidence/<stage>/<cell>/`` a ``cell.json``, ``jobs.parquet``,
``requests.parquet``, ``server.log`` and the scheduler trace (parquet, or JSON lines in the first run). A run may
also keep cells outside any archive, under ``cells/<cell>/`` (the capacity run kept no traces nor logs). The archives'
members are read in memory, never extracted.

Each measured cell becomes a ``GpuCell``: the run and call it belongs to, what its engine was asked for as the simulator
takes it (``engine_setup.EngineSetup`` and ``WorkloadSpec``, read from the requested side of ``cell.json``), its jobs
and requests, its scheduler trace, its server log and what its CPU tier's counters said. Only done cells of a real engine on a GPU type of the catalogue are kept.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from orchestrator.gpus import GPU_TYPES
from orchestrator.paths import PROJECT_ROOT
from orchestrator.policies.engine_setup import EngineOptions, EngineSetup, engine_setup
from orchestrator.records.cell import TierCounters
from orchestrator.records.intervals import censored_times
from orchestrator.records.layout import (
    CELL_CONFIG_FILE,
    JOBS_FILE,
    LEGACY_SCHEDULER_TRACE_FILE,
    REQUESTS_FILE,
    SCHEDULER_TRACE_FILE,
    SERVER_LOG_FILE,
)
from orchestrator.records.names import current_names
from orchestrator.records.scheduler_trace_file import trace_frame
from orchestrator.sim.profile import steps_in_flight_of
from orchestrator.workload.spec import WorkloadSpec

GPU_RUNS_DIR = PROJECT_ROOT / "docs" / "gpu-runs"
EVIDENCE_ARCHIVE = "evidence.tar.xz"
KEPT_CELLS_DIR = "cells"  # a run's cells kept outside any archive
_RUN_NAME = re.compile(r"^(\d{4}-\d\d-\d\d)-([A-Za-z0-9]+)(?:-[\w.-]+)?$")
_CALL_NAME = re.compile(r"^call-(\d+)$")
_FILES = (CELL_CONFIG_FILE, JOBS_FILE, REQUESTS_FILE, SERVER_LOG_FILE, SCHEDULER_TRACE_FILE,
          LEGACY_SCHEDULER_TRACE_FILE)  # fmt: skip


@dataclass(frozen=True, order=True)
class RunId:
    """Where a cell was measured: its dated run (one GPU machine's session, with its page) and the evidence call that
    ran it (None for cells a run kept outside its archives)."""

    run: str  # the run's folder, e.g. "2026-11-27-H100"
    call: int | None

    @property
    def label(self) -> str:
        return self.run if self.call is None else f"{self.run}/call-{self.call}"


@dataclass(frozen=True, eq=False)
class GpuCell:
    """One measured cell: what ran and what it measured. ``jobs`` and ``requests`` are the cell's parquet tables as
    written (``records.schema``); ``trace`` is its scheduler trace as a table (None where the run kept none)."""

    run: RunId
    name: str  # its folder inside the call: "<stage>/<cell>", e.g. "pressure/lmcache"
    setup: EngineSetup  # the engine it asked for, the device's defaults filled in
    workload: WorkloadSpec
    schedule_fingerprint: str | None  # cells compare job by job only on one schedule
    jobs: pd.DataFrame
    requests: pd.DataFrame
    scheduler_trace: pd.DataFrame | None
    server_log: str
    server_argv: tuple[str, ...]
    tier_counters: TierCounters
    num_preemptions: int | None

    @property
    def key(self) -> str:
        return f"{self.run.label}/{self.name}"

    @property
    def gpu(self) -> str:
        return self.setup.gpu

    @property
    def policy(self) -> str:
        return self.setup.policy

    @property
    def steps_in_flight(self) -> int:
        """Steps its engine keeps in flight by its scheduler class (``profile.steps_in_flight_of``)."""
        return steps_in_flight_of(self.server_argv)

    @cached_property
    def job_times(self) -> pd.Series:
        """Each job's time by ``job_index``: completed, or censored where it was cut (``intervals.censored_times``), as
        the verdicts count it."""
        jobs = self.jobs.sort_values("job_index")
        times = censored_times(jobs.arrival_at.to_numpy(dtype=float), jobs.finished_at.to_numpy(dtype=float))
        return pd.Series(times, index=jobs.job_index.to_numpy())

    @property
    def jct_mean_s(self) -> float:
        """The censored mean job time."""
        return float(np.mean(self.job_times))


def run_dirs(root: Path = GPU_RUNS_DIR) -> list[Path]:
    """The dated run folders under ``root``, in name order."""
    return sorted(path for path in root.iterdir() if path.is_dir() and _RUN_NAME.match(path.name))


def read_runs(directories: Sequence[Path]) -> list[GpuCell]:
    """Every measured GPU cell of the runs ``directories`` name: each call's archive, then the cells kept beside them.
    Raises ``ValueError`` (one line) for a folder that is not a dated run."""
    cells = []
    for directory in directories:
        if not _RUN_NAME.match(directory.name) or not directory.is_dir():
            raise ValueError(f"{directory}: not a GPU run's folder; valid: <date>-<GPU>[-<what>] under {GPU_RUNS_DIR}")
        for call_dir in sorted(directory.iterdir(), key=_call_order):
            match = _CALL_NAME.match(call_dir.name)
            if match and (call_dir / EVIDENCE_ARCHIVE).is_file():
                run = RunId(directory.name, int(match.group(1)))
                cells += [cell for name, files in _archive_cells(call_dir / EVIDENCE_ARCHIVE)
                          if (cell := gpu_cell(run, name, files)) is not None]  # fmt: skip
        kept = directory / KEPT_CELLS_DIR
        for cell_dir in sorted(kept.iterdir()) if kept.is_dir() else ():
            files = {path.name: path.read_bytes() for path in cell_dir.iterdir() if path.name in _FILES}
            if (cell := gpu_cell(RunId(directory.name, None), f"{KEPT_CELLS_DIR}/{cell_dir.name}", files)) is not None:
                cells.append(cell)
    return cells


def gpu_cell(run: RunId, name: str, files: Mapping[str, bytes]) -> GpuCell | None:
    """The cell whose files (by name) are ``files``; None unless it is a done cell of a real engine on a GPU type of
    the catalogue with its records."""
    if CELL_CONFIG_FILE not in files or JOBS_FILE not in files or REQUESTS_FILE not in files:
        return None
    payload = current_names(json.loads(files[CELL_CONFIG_FILE]))
    cell = payload["cell"]
    if payload.get("status") != "done" or cell["engine"] == "sim" or cell["gpu"] not in GPU_TYPES:
        return None
    if cell.get("replicas", 1) != 1:
        raise ValueError(f"{run.label}/{name}: {cell['replicas']} replicas; valid: cells of one replica")
    options = EngineOptions.model_validate(cell["engine_options"])
    setup = engine_setup(options, model=cell["model"], policy=cell["policy"], gpu=cell["gpu"], tp=cell.get("tp", 1),
                         dram_gb=cell["dram_gb"])  # fmt: skip
    trace = files.get(SCHEDULER_TRACE_FILE) or files.get(LEGACY_SCHEDULER_TRACE_FILE)
    return GpuCell(
        run=run, name=name, setup=setup, workload=WorkloadSpec.model_validate(cell["workload"]),
        schedule_fingerprint=payload.get("schedule_fingerprint"),
        jobs=pd.read_parquet(io.BytesIO(files[JOBS_FILE])), requests=pd.read_parquet(io.BytesIO(files[REQUESTS_FILE])),
        scheduler_trace=trace_frame(trace) if trace else None,
        server_log=files.get(SERVER_LOG_FILE, b"").decode(errors="replace"),
        server_argv=tuple(payload.get("server_argv") or ()),
        tier_counters=TierCounters(**(payload.get("tier_counters") or {})),
        num_preemptions=payload.get("num_preemptions"),
    )  # fmt: skip


def _archive_cells(path: Path) -> Iterator[tuple[str, dict[str, bytes]]]:
    """Each cell folder of an evidence archive ("<stage>/<cell>") with its files' bytes, in member order."""
    found: dict[str, dict[str, bytes]] = {}
    with tarfile.open(path, "r:xz") as archive:
        for member in archive:
            parts = Path(member.name).parts  # evidence/<stage>/<cell>/<file>
            if member.isfile() and len(parts) == 4 and parts[3] in _FILES:
                found.setdefault(f"{parts[1]}/{parts[2]}", {})[parts[3]] = archive.extractfile(member).read()
    yield from found.items()


def _call_order(path: Path) -> tuple[int, str]:
    match = _CALL_NAME.match(path.name)
    return (int(match.group(1)) if match else 0, path.name)
