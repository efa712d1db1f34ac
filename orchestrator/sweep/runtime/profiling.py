"""The CPU engine's profile on this machine, for the simulator: a few trials of one real cell, measured as
ordinary cells of their own sweep (``<sweep>-profile``: tracked, and a re-run reuses them), fitted by
``sim/profile.py``.

The CPU build of vLLM runs at whatever speed the machine gives it (the same cell took 4 s on one
development machine and 11 s on another), so the profile is measured where the cells it predicts run,
never shipped.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from orchestrator.cell.cell_json import read_cell_json
from orchestrator.cell.spec import EngineKind
from orchestrator.gpus import CPU
from orchestrator.inputs.validation import InputError
from orchestrator.models.arch import load_model
from orchestrator.records.cell import CellStatus
from orchestrator.records.layout import SweepFiles
from orchestrator.records.names import read_summary
from orchestrator.records.scheduler_trace_file import trace_file_frame
from orchestrator.roofline.hardware import CpuProfile
from orchestrator.sim.profile import (
    PROFILE_JPS,
    PROFILE_POLICY,
    PROFILE_SEED,
    PROFILE_TRIALS,
    ProfilingCell,
    profile_from_cells,
)
from orchestrator.sweep.planning.spec import SweepSpec


def profile_spec(spec: SweepSpec) -> SweepSpec:
    """The sweep of the profiling cells: ``spec``'s model, workload and engine options on the CPU engine, one
    replica talked to directly (the profile is one engine's; the simulator puts routers in front of it)."""
    return spec.model_copy(update={
        "name": f"{spec.name}-profile", "engine": EngineKind.VLLM, "gpus": (CPU,), "policies": (PROFILE_POLICY,),
        "jps": (PROFILE_JPS,), "dram_gb": (0.0,), "dram_gb_by_gpu": {}, "seeds": (PROFILE_SEED,),
        "trials": PROFILE_TRIALS, "cpu_profile": None, "replicas": (1,), "serve_overhead": False,
    })  # fmt: skip


def measure_cpu_profile(spec: SweepSpec, options) -> CpuProfile:
    """Run (or find done) the profiling cells of ``spec`` and fit the profile from their records."""
    from orchestrator.sweep.runtime.driver import run_sweep

    code = run_sweep(profile_spec(spec), options)
    if code != 0:
        raise SystemExit(code)
    return read_cpu_profile(spec, options.results_dir)


def read_cpu_profile(spec: SweepSpec, results_dir: Path) -> CpuProfile:
    """The profile fitted from ``spec``'s profiling cells in ``results_dir``, every one of them done; prints a line for
    each constant of it that the cells did not determine."""
    files = SweepFiles(results_dir / profile_spec(spec).name)
    cells, pools = [], set()
    for row in read_summary(files.summary).itertuples():
        if row.status != CellStatus.DONE.value:
            raise InputError(f"a profiling cell of the CPU engine ({files.cell(row.cell_key).directory}) is "
                             f"{row.status}: {row.reason}")  # fmt: skip
        cell = files.cell(row.cell_key)
        config = read_cell_json(cell.config)
        pools.add((config.engine_facts.num_kv_blocks, config.engine_facts.block_size))
        cells.append(ProfilingCell(trace_file_frame(cell.scheduler_trace), pd.read_parquet(cell.requests),
                                   config.cell.workload))  # fmt: skip
    if len(pools) != 1:
        raise InputError(f"the profiling cells in {files.directory} ran on different KV pools {sorted(pools)}")
    ((num_kv_blocks, block_size),) = pools
    fitted = profile_from_cells(cells, num_kv_blocks, block_size, load_model(spec.model))
    for note in fitted.notes:
        print(f"[{files.directory.name}] the CPU engine's profile: {note}", flush=True)
    return fitted.profile
