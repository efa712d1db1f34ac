"""Reading a sweep's results directory (BRIEF section 6 layout) into frames the tables and plots use.

Only ``summary.parquet`` is required; per-turn statistics come from each done cell's ``summary.json``,
and the raw records and scheduler trace are read per cell on demand.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from orchestrator.analysis.verdicts import CellRecords, censored_job_times, replica_shapes, routed_arms
from orchestrator.records.cell import CellStatus
from orchestrator.records.layout import SweepFiles
from orchestrator.gpus import CPU
from orchestrator.records.names import read_summary
from orchestrator.sim.error_bands import SimErrors
from orchestrator.sim.stacks import SOURCE_STUDY, stacks_errors

# What the numbers of an engine are, said on every table of a report.
PROVENANCE = {
    "vllm": "measured on real vLLM",
    "sim": "simulated",
    "fake": "fake engine: orchestration check, not a measurement",
}
DUMMY_WEIGHTS = "dummy weights (random weights of the model's exact shapes, fixed-length answers)"


@dataclass(frozen=True)
class SweepData:
    name: str
    directory: Path
    summary: pd.DataFrame  # one row per cell, every status
    turns: pd.DataFrame  # one row per (cell_key, turn) of the done cells

    @property
    def done(self) -> pd.DataFrame:
        return self.summary[self.summary.status == CellStatus.DONE.value]

    @property
    def gpus(self) -> list[str]:
        return sorted(self.summary.gpu.unique())

    @property
    def tool_time_s(self) -> float:
        return float(self.summary.tool_time_s.iloc[0]) if "tool_time_s" in self.summary and len(self.summary) else 0.5

    @property
    def files(self) -> SweepFiles:
        return SweepFiles(self.directory)

    def provenance(self, rows: pd.DataFrame | None = None) -> str:
        """What the numbers in ``rows`` (default: the whole sweep) are: measured, simulated or fake, and with
        which weights where some were dummy ones."""
        rows = self.summary if rows is None else rows
        engines = sorted(set(rows.engine))
        ran = self.done if rows is self.summary else rows
        devices = sorted({str(d) for d in ran.get("device_name", []) if d and d == d})
        parts = [PROVENANCE.get(engine, engine) + (", ".join(["", *sim_stacks(rows)]) if engine == "sim" else "")
                 for engine in engines]  # fmt: skip
        weights = {w for w in rows.get("weights", []) if w and w == w}
        text = "; ".join(parts) + (f" ({', '.join(devices)})" if devices and "vllm" in engines else "")
        if "dummy" in weights:
            text += "; " + (DUMMY_WEIGHTS if weights == {"dummy"} else f"some cells with {DUMMY_WEIGHTS}")
        return text


def sim_stacks(summary: pd.DataFrame) -> list[str]:
    """The engine stacks the simulated GPU cells of ``summary`` ran (``sim.stacks``); a summary from before stacks has
    none, which is the source study's."""
    simulated = summary[(summary.engine == "sim") & (summary.gpu != CPU)]
    if not len(simulated):
        return []
    named = simulated.get("sim_stack", pd.Series(None, index=simulated.index))
    return sorted({str(name) if name == name and name is not None else SOURCE_STUDY for name in named})


def sim_errors(summary: pd.DataFrame) -> SimErrors:
    """The bands the simulated verdicts of ``summary`` must clear: their stacks' (``stacks.stacks_errors``)."""
    return stacks_errors(sim_stacks(summary))


def sweep_files(directory: Path) -> SweepFiles:
    """The files of the sweep in ``directory``; raises ``FileNotFoundError`` saying so where it holds none."""
    directory = Path(directory).absolute()
    files = SweepFiles(directory)
    if not files.summary.exists():
        raise FileNotFoundError(f"{files.summary} does not exist: is {directory} a sweep's results directory "
                                "(DIR/<sweep>)?")  # fmt: skip
    return files


def load_sweep(directory: Path) -> SweepData:
    directory = Path(directory).absolute()
    files = sweep_files(directory)
    path = files.summary
    summary = replica_shapes(routed_arms(_measured_over_simulated(read_summary(path))))
    turns = []
    for key in summary[summary.status == CellStatus.DONE.value].cell_key:
        try:
            cell_turns = json.loads(files.cell(key).summary.read_text())["turns"]
        except FileNotFoundError:
            continue
        turns += [{"cell_key": key, **turn} for turn in cell_turns]
    columns = ["cell_key", "turn", "latency_mean_s", "ttft_mean_s", "cached_fraction", "best_cached_fraction"]
    turns_frame = pd.DataFrame(turns) if turns else pd.DataFrame(columns=columns)
    name = summary.sweep.iloc[0] if len(summary) else directory.name
    return SweepData(name, directory, summary, turns_frame)


def cell_records(files: SweepFiles) -> Callable[[str], CellRecords]:
    """What the verdicts read of a done cell of the sweep in ``files``, by its key."""

    def records_of(cell_key: str) -> CellRecords:
        cell = files.cell(cell_key)
        return CellRecords(censored_job_times(pd.read_parquet(cell.jobs)), pd.read_parquet(cell.requests))

    return records_of


def _measured_over_simulated(summary: pd.DataFrame) -> pd.DataFrame:
    """An ``auto`` sweep simulates a GPU type until the cluster has one and then measures it: where a cell
    is done both ways, the report shows the measurement (the simulated cell stays in the results)."""
    axes = [column for column in ("gpu", "tp", "policy", "jps", "dram_gb", "seed") if column in summary]
    if "engine" not in summary or not len(summary):
        return summary
    measured = summary[(summary.engine == "vllm") & (summary.status == CellStatus.DONE.value)][axes].drop_duplicates()
    simulated = summary.engine == "sim"
    superseded = summary[simulated].reset_index().merge(measured, on=axes)["index"]
    return summary.drop(index=superseded).reset_index(drop=True)
