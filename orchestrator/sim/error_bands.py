"""The simulator's own error, as data: per policy, one table per source that measured it, and per GPU type, how far
its roofline is from published measurements of that GPU. A simulated verdict must clear the band they make together
(``analysis/verdicts.py``).

Sources, each written by the tool that measures it:

- ``calibration`` (per policy): RMS relative error of mean JCT over the H200 cells of the source study
  (``python -m orchestrator.sim.calibrate --write-errors``);
- ``cpu_pressure`` (per policy): RMS relative error of mean JCT over the CPU engine's pressure grid, where the real
  vLLM scheduler and the real Continuum plugin run under KV pressure (``benchmarks/sim_vs_cpu.py --write-errors``);
- ``gpu_pressure`` (per policy): RMS relative error of mean JCT over the pressure plan's cells measured on a GPU,
  each predicted before it ran (``python -m orchestrator.cli.pressure compare ... --write-errors``);
- ``public_figures`` (per GPU type): RMS relative error of the simulated against the published figures of that GPU
  (``benchmarks/public_figures.py --write-errors``).

A policy's error is the largest any source found, a policy no source measured takes the largest of any policy, and a
GPU type with no published figure takes the largest of any GPU type. ``gpu_pressure`` measures one cell per policy,
too few to make a band narrower: it widens a policy's error, and never sets one below what the policy would take
unmeasured. Finer than all of these, simulated policies within ``TIE`` (1%) of each other are a tie: the simulator
calls no winner between them.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

SIM_ERROR_FILE = Path(__file__).parent / "sim_error.toml"
SOURCES = {
    "calibration": "RMS over the H200 calibration cells: python -m orchestrator.sim.calibrate --write-errors",
    "cpu_pressure": "RMS over the CPU engine's pressure grid: python benchmarks/sim_vs_cpu.py --write-errors",
    "gpu_pressure": "RMS over the pressure plan's GPU cells, predicted first: python -m orchestrator.cli.pressure "
                    "compare PREDICTIONS EVIDENCE... --write-errors",
}
WIDENING_SOURCES = ("gpu_pressure",)
GPU_SOURCE = "public_figures"
GPU_SOURCE_NOTE = "RMS per GPU type over its published figures: python benchmarks/public_figures.py --write-errors"
TIE = 0.01  # policies within 1% of each other: the simulator calls no winner


@dataclass(frozen=True)
class SimErrors:
    """The simulator's relative errors: per policy (the largest any source found) and per GPU type."""

    policies: Mapping[str, float]
    gpus: Mapping[str, float] = field(default_factory=dict)

    def policy_error(self, policy: str) -> float:
        """A policy's error; an unmeasured one takes the largest of any policy."""
        return self.policies.get(policy, max(self.policies.values(), default=0.0))

    def gpu_error(self, gpu: str) -> float:
        """A GPU type's error; an unmeasured one takes the largest of any type."""
        return self.gpus.get(gpu, max(self.gpus.values(), default=0.0))

    def cell_band(self, gpu: str, policy: str) -> float:
        """The relative error of one simulated cell's mean JCT: its policy's and its GPU's combined as independent."""
        return math.hypot(self.policy_error(policy), self.gpu_error(gpu))

    def band_pct(self, gpu: str, a: str, b: str) -> float:
        """The margin a simulated comparison of policies ``a`` and ``b`` on ``gpu`` must clear, in percent: the two
        policies' errors and the GPU's combined as independent (root sum of squares)."""
        return math.sqrt(self.policy_error(a) ** 2 + self.policy_error(b) ** 2 + self.gpu_error(gpu) ** 2) * 100


def load_error_tables(path: Path = SIM_ERROR_FILE) -> dict[str, dict[str, float]]:
    """Each source's errors (by policy, or by GPU type for ``public_figures``), as stored."""
    tables = tomllib.loads(path.read_text()) if path.exists() else {}
    unknown = set(tables) - set(SOURCES) - {GPU_SOURCE}
    if unknown:
        raise ValueError(f"{path}: unknown error sources {sorted(unknown)}; known: {sorted([*SOURCES, GPU_SOURCE])}")
    return tables


def load_errors(path: Path = SIM_ERROR_FILE) -> SimErrors:
    """The errors a simulated verdict must clear: per policy and per GPU type."""
    tables = load_error_tables(path)
    return SimErrors(_policy_errors(tables), {gpu: float(error) for gpu, error in tables.get(GPU_SOURCE, {}).items()})


def _policy_errors(tables: dict[str, dict[str, float]]) -> dict[str, float]:
    """Per policy, the largest relative error any source measured; a widening source's, never below the largest of
    the others' where they did not measure the policy."""
    bands: dict[str, float] = {}
    for source in SOURCES:
        if source in WIDENING_SOURCES:
            continue
        for policy, error in tables.get(source, {}).items():
            bands[policy] = max(bands.get(policy, 0.0), float(error))
    unmeasured = max(bands.values(), default=0.0)
    for source in WIDENING_SOURCES:
        for policy, error in tables.get(source, {}).items():
            bands[policy] = max(bands.get(policy, unmeasured), float(error))
    return bands


def write_errors(source: str, errors: dict[str, float], path: Path = SIM_ERROR_FILE) -> None:
    """Replace ``source``'s table of errors by policy, keeping the others; the file is swapped in whole."""
    if source not in SOURCES:
        raise ValueError(f"unknown error source {source!r}; known: {sorted(SOURCES)}")
    _write(load_error_tables(path) | {source: errors}, path)


def write_gpu_errors(errors: dict[str, float], path: Path = SIM_ERROR_FILE) -> None:
    """Replace the table of errors by GPU type, keeping the others; the file is swapped in whole."""
    _write(load_error_tables(path) | {GPU_SOURCE: errors}, path)


def _write(tables: dict[str, dict[str, float]], path: Path) -> None:
    lines = [
        "# The simulator's relative errors (orchestrator/sim/error_bands.py): of mean JCT per policy, one table per",
        "# source that measured it, and of published figures per GPU type. A simulated verdict must clear the two",
        "# policies' errors and its GPU's combined; a policy's error is the largest any source found, and a policy or",
        "# GPU type nothing measured takes the largest of its kind.",
    ]
    for name, note in [*SOURCES.items(), (GPU_SOURCE, GPU_SOURCE_NOTE)]:
        if name in tables:
            lines += ["", f"# {note}", f"[{name}]"]
            lines += [f'"{key}" = {error:.4f}' for key, error in sorted(tables[name].items())]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
