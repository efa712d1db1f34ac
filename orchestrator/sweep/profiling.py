"""The CPU engine's profile on this machine, for the simulator: one real cell, measured as an ordinary cell
of its own sweep (``<sweep>-profile``: tracked, and a re-run reuses it), fitted by ``sim/profile.py``.

The CPU build of vLLM runs at whatever speed the machine gives it (the same cell took 4 s on one
development machine and 11 s on another), so the profile is measured where the cells it predicts run,
never shipped.
"""

from __future__ import annotations

import json

import pandas as pd

from orchestrator.gpus import CPU
from orchestrator.records.cell import CellConfig, CellStatus
from orchestrator.records.layout import SweepFiles
from orchestrator.sim.profile import PROFILE_JPS, PROFILE_POLICY, PROFILE_SEED, CpuProfile, profile_from_cell
from orchestrator.sizing.models import load_model
from orchestrator.sweep.spec import EngineKind, SweepSpec
from orchestrator.validation import InputError


def profile_spec(spec: SweepSpec) -> SweepSpec:
    """The sweep of the profiling cell: ``spec``'s model, workload and engine options on the CPU engine."""
    return spec.model_copy(update={
        "name": f"{spec.name}-profile", "engine": EngineKind.VLLM, "gpus": (CPU,), "policies": (PROFILE_POLICY,),
        "jps": (PROFILE_JPS,), "dram_gb": (0.0,), "dram_gb_by_gpu": {}, "seeds": (PROFILE_SEED,), "trials": 1,
        "cpu_profile": None,
    })  # fmt: skip


def measure_cpu_profile(spec: SweepSpec, options) -> CpuProfile:
    """Run (or find done) the profiling cell of ``spec`` and fit the profile from its records."""
    from orchestrator.sweep.driver import run_sweep

    profiling = profile_spec(spec)
    code = run_sweep(profiling, options)
    if code != 0:
        raise SystemExit(code)
    files = SweepFiles(options.results_dir / profiling.name)
    (row,) = pd.read_parquet(files.summary).itertuples()
    if row.status != CellStatus.DONE.value:
        raise InputError(f"the CPU engine's profiling cell ({files.directory}) is {row.status}: {row.reason}")
    cell = files.cell(row.cell_key)
    facts = CellConfig.from_json(json.loads(cell.config.read_text())).engine_facts
    workload = spec.workload.model_copy(update={"jps": PROFILE_JPS, "seed": PROFILE_SEED})
    return profile_from_cell(pd.read_json(cell.scheduler_trace, lines=True), pd.read_parquet(cell.requests),
                             facts.num_kv_blocks, facts.block_size, load_model(spec.model), workload)  # fmt: skip
