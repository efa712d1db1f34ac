"""The simulator's own error per policy, as data: one table per source that measured it, and the band a
simulated verdict must clear is the largest any source found (``analysis/verdicts.py``).

Sources, each written by the tool that measures it:

- ``calibration``: RMS relative error of mean JCT over the H200 cells of the source study
  (``python -m orchestrator.sim.calibrate --write-errors``);
- ``cpu_pressure``: RMS relative error of mean JCT over the CPU engine's pressure grid, where the real vLLM
  scheduler and the real Continuum plugin run under KV pressure (``benchmarks/sim_vs_cpu.py --write-errors``).

A policy no source measured takes the largest error of any policy.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

SIM_ERROR_FILE = Path(__file__).parent / "sim_error.toml"
SOURCES = {
    "calibration": "RMS over the H200 calibration cells: python -m orchestrator.sim.calibrate --write-errors",
    "cpu_pressure": "RMS over the CPU engine's pressure grid: python benchmarks/sim_vs_cpu.py --write-errors",
}


def load_error_tables(path: Path = SIM_ERROR_FILE) -> dict[str, dict[str, float]]:
    """Each source's errors by policy, as stored."""
    tables = tomllib.loads(path.read_text()) if path.exists() else {}
    unknown = set(tables) - set(SOURCES)
    if unknown:
        raise ValueError(f"{path}: unknown error sources {sorted(unknown)}; known: {sorted(SOURCES)}")
    return tables


def load_policy_errors(path: Path = SIM_ERROR_FILE) -> dict[str, float]:
    """Per policy, the largest relative error any source measured: the simulator's error band."""
    bands: dict[str, float] = {}
    for errors in load_error_tables(path).values():
        for policy, error in errors.items():
            bands[policy] = max(bands.get(policy, 0.0), float(error))
    return bands


def write_errors(source: str, errors: dict[str, float], path: Path = SIM_ERROR_FILE) -> None:
    """Replace ``source``'s table, keeping the others; the file is swapped in whole."""
    if source not in SOURCES:
        raise ValueError(f"unknown error source {source!r}; known: {sorted(SOURCES)}")
    tables = load_error_tables(path) | {source: errors}
    lines = [
        "# The simulator's relative error of mean JCT per policy, one table per source that measured it",
        "# (orchestrator/sim/error_bands.py). A simulated verdict must clear the two policies' bands combined,",
        "# a policy's band being the largest error any source found; policies no source measured take the largest.",
    ]
    for name in SOURCES:
        if name in tables:
            lines += ["", f"# {SOURCES[name]}", f"[{name}]"]
            lines += [f'"{policy}" = {error:.4f}' for policy, error in sorted(tables[name].items())]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
