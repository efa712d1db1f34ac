"""Preflight of a cell: before any GPU hour, which regime will it measure (pure, from the sizing library)?

A sweep prints one table of its cells by regime (``regime_table``), the reasons per cell go to
``DIR/<sweep>/preflight.csv`` and ``--dry-run``, and each cell's MLflow run is tagged with its own. The table
counts the cells to look at: a policy with a CPU tier that cannot matter (everything fits on the GPU), and the
cells whose live set will not fit (queueing). Never a refusal: a queueing cell is a legitimate measurement, as long
as it is known to be one. A cell of several replicas is sized per replica, with its share of the jobs; a
tensor-parallel replica as its ranks together, with what each rank holds said beside.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from orchestrator.cell.spec import CellSpec
from orchestrator.gpus import GPU_TYPES
from orchestrator.models.arch import load_model
from orchestrator.sizing.agent import agent_working_sets
from orchestrator.sizing.kv import Regime, regime


@dataclass(frozen=True)
class Preflight:
    regime: Regime | None
    note: str
    warn: bool


def preflight(cell: CellSpec) -> Preflight:
    if cell.gpu not in GPU_TYPES:
        return Preflight(None, f"no estimate for the {cell.gpu} device (no roofline)", False)
    try:
        arch = load_model(cell.model)
    except ValueError:
        return Preflight(None, f"no estimate: no config for model {cell.model!r}", False)
    setup = cell.engine_setup
    sets = agent_working_sets(cell.workload, arch, GPU_TYPES[cell.gpu], cell.replicas)
    sizing = setup.sizing(arch)
    fixed = setup.num_kv_blocks
    gpu_tokens = fixed * setup.block_size if fixed is not None else sizing.gpu_kv_tokens
    fit = regime(gpu_tokens, sets.live_tokens, sets.corpus_tokens)
    each = " per replica" if cell.replicas > 1 else ""
    note = (f"{fit.value}: live {sets.live_tokens / 1e3:,.0f}K, corpus {sets.corpus_tokens / 1e3:,.0f}K tokens "
            f"vs GPU KV {gpu_tokens / 1e3:,.0f}K{each}; offered load {sets.offered_load:.2f}{each}")  # fmt: skip
    if sizing.cpu_kv_tokens is not None:
        note += f"; CPU tier {sizing.cpu_kv_tokens / 1e3:,.0f}K tokens"
    if cell.tp > 1:
        note += f"; {sizing.rank_phrase()}"
    warn = (fit is Regime.FITS_ON_GPU and setup.tier_gib > 0) or fit is Regime.QUEUEING
    return Preflight(fit, note, warn)


NO_ESTIMATE = "no estimate"


def regime_table(checks: Sequence[Preflight]) -> list[str]:
    """One line per regime the cells are in: how many, and what their runs measure; those that fit on the GPU say
    how many of them have a CPU tier with nothing to do."""
    counts = Counter(check.regime for check in checks)
    idle_tiers = sum(check.warn for check in checks if check.regime is Regime.FITS_ON_GPU)
    width = max(len(kind.value) for kind in Regime)
    lines = []
    for kind in (*Regime, None):
        if not counts[kind]:
            continue
        name, meaning = (kind.value, kind.meaning) if kind else (NO_ESTIMATE, "no roofline or model config")
        idle = f" ({idle_tiers} with a CPU tier that cannot matter)" if kind is Regime.FITS_ON_GPU and idle_tiers else ""
        lines.append(f"  {name:<{width}}  {counts[kind]:>5} cells: {meaning}{idle}")
    return lines


def preflight_frame(cells: Sequence[CellSpec], checks: Mapping[str, Preflight]) -> pd.DataFrame:
    """Each cell's preflight (``checks`` by cell key), a row per cell: the sweep's ``preflight.csv``."""
    return pd.DataFrame([{"cell_key": cell.key, "label": cell.label,
                          "regime": checks[cell.key].regime.value if checks[cell.key].regime else NO_ESTIMATE,
                          "noted": checks[cell.key].warn, "reasons": checks[cell.key].note} for cell in cells])  # fmt: skip
