"""The capacity search over cells whose ends are known (``orchestrator/capacity/search.py``, no Ray, no tracking store):
a load where a trial failed or hung is not met and capacity.csv says which, a load met above it is reported as not
monotone, and only the cells of the search's own grid are its trials. The rounds' sweeps are stood in for by
``ScriptedRounds``, which leaves each cell's records and the summary as the driver's ledger does."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from orchestrator.analysis.capacity import capacity_table, sentences
from orchestrator.capacity import search
from orchestrator.capacity.search import CapacityAsk, run_capacity
from orchestrator.cell.spec import CellSpec, EngineKind
from orchestrator.crossover.search import SearchRange
from orchestrator.records.layout import SweepFiles
from orchestrator.records.names import read_summary
from orchestrator.records.slo import Slo
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.sweeps.capacity import SPEC
from tests.sweep.conftest import options

SLO = Slo.parse("jct_p90=60s")
MET_S, MISSED_S = 10.0, 1000.0  # every job's completion time in a met cell, and in a missed one
NUM_JOBS = 40  # enough jobs for a p90 to be bounded from above
# Start loads 1, 2, 4, 8, 16 (geometric), and a resolution no narrower bracket needs: the search asks those alone.
WITHIN = SearchRange(1.0, 16.0, 4.0)
GRID = SPEC.model_copy(update={"gpus": ("H200",), "policies": ("fcfs", "continuum", "lmcache"), "dram_gb": (400.0,),
                               "dram_gb_by_gpu": {}, "trials": 2, "tp": (1,)})  # fmt: skip


def _ends_by_default(cell: CellSpec, trial: int) -> str | float:
    """Met up to 4 JPS, missed above."""
    return MET_S if cell.jps <= 4 else MISSED_S


class ScriptedRounds:
    """A search's rounds where each cell ends as ``ends(cell, trial)`` says: a status, or a done cell's job completion
    time. Done cells are skipped on the next round and kept in the summary with the other cells of the grid run last,
    as the ledger keeps them."""

    @staticmethod
    def ends(cell: CellSpec, trial: int) -> str | float:
        raise NotImplementedError

    def __init__(self, options):
        self.options = options

    def __enter__(self) -> ScriptedRounds:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def run(self, spec: SweepSpec) -> None:
        files = SweepFiles(self.options.results_dir / spec.name)
        done = read_summary(files.summary) if files.summary.exists() else pd.DataFrame(columns=["cell_key", "status"])
        done = done[done.status == "done"]
        rows, done_keys = done.to_dict("records"), set(done.cell_key)
        for cell in (cell for cell in expand(spec) if cell.key not in done_keys):
            end = self.ends(cell, spec.cell_seeds().index(cell.seed))
            done_in = end if isinstance(end, float) else None
            rows.append(cell.summary_columns() | {"sweep": spec.name, "status": "done" if done_in is not None else end})
            if done_in is not None:
                write_records(files, cell, done_in)
        files.summary.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_parquet(files.summary)


def write_records(files: SweepFiles, cell: CellSpec, jct_s: float) -> None:
    """A done cell's jobs and requests, every job completed in ``jct_s`` (one turn each)."""
    cell_files = files.cell(cell.key)
    cell_files.directory.mkdir(parents=True, exist_ok=True)
    index = np.arange(NUM_JOBS)
    arrival = index * 0.5
    finished = arrival + jct_s + index * 0.01
    pd.DataFrame({"job_index": index, "status": "completed", "arrival_at": arrival,
                  "finished_at": finished}).to_parquet(cell_files.jobs)  # fmt: skip
    pd.DataFrame({"job_index": index, "status": "ok", "scheduled_at": arrival, "first_token_at": arrival + 0.1,
                  "finished_at": finished, "completion_tokens": 20}).to_parquet(cell_files.requests)  # fmt: skip


@pytest.fixture
def capacity_of_search(tmp_path, monkeypatch):
    """Runs the search with cells ending as ``ends`` says; its capacity.csv, one row per policy."""
    monkeypatch.setattr(search, "publish_search_report", lambda sweep, options: None)

    def searched(ends) -> pd.DataFrame:
        monkeypatch.setattr(search, "SearchRounds", type("Rounds", (ScriptedRounds,), {"ends": staticmethod(ends)}))
        assert run_capacity(GRID, options(tmp_path), EngineKind.SIM, CapacityAsk(SLO, WITHIN)) == 0
        return pd.read_csv(SweepFiles(tmp_path / GRID.name).capacity).set_index("policy")

    return searched


def test_a_load_where_a_trial_failed_or_hung_is_not_met_and_capacity_csv_and_the_report_say_which(capacity_of_search):
    def ends(cell: CellSpec, trial: int) -> str | float:
        if cell.policy == "fcfs" and cell.jps == 2 and trial == 1:
            return "failed"  # the other trial met the SLO there
        if cell.policy == "continuum" and cell.jps == 4:
            return "hung"
        return _ends_by_default(cell, trial)

    capacity = capacity_of_search(ends)
    fcfs, continuum, lmcache = (capacity.loc[policy] for policy in ("fcfs", "continuum", "lmcache"))
    assert [(row.capacity_jps, row.first_unmet_jps) for row in (fcfs, continuum, lmcache)] == [(1, 2), (2, 4), (4, 8)]
    assert [row.at_first_unmet for row in (fcfs, continuum, lmcache)] == ["failed", "hung", "missed"]
    assert fcfs.non_monotone_jps == 4  # met at 4 above the failure at 2: read back from the CSV as a number
    assert pd.isna(continuum.non_monotone_jps) and pd.isna(lmcache.non_monotone_jps)
    frame = capacity.reset_index()
    assert list(capacity_table(frame).at_first_unmet) == ["failed", "hung", "missed"]
    said = sentences(frame, None)
    assert "On H200, a trial of fcfs failed at 2 JPS, counted as not met." in said
    assert "On H200, a trial of continuum hung at 4 JPS, counted as not met." in said
    assert ("On H200, fcfs met the SLO again at 4 JPS, above 2 where it did not: not monotone in load, as its capacity "
            "assumes.") in said  # fmt: skip


def test_a_cell_of_another_workload_in_the_sweep_directory_does_not_change_the_answer(tmp_path, capacity_of_search):
    # The same arm at the same load, but a longer arrival window: another cell, which missed the SLO.
    longer = GRID.model_copy(update={"engine": EngineKind.SIM, "policies": ("fcfs",), "jps": (4.0,), "trials": 1,
                                     "workload": GRID.workload.model_copy(update={"duration_s": 300.0})})  # fmt: skip
    (cell,) = expand(longer)
    files = SweepFiles(tmp_path / GRID.name)
    write_records(files, cell, MISSED_S)
    pd.DataFrame([cell.summary_columns() | {"sweep": GRID.name, "status": "done"}]).to_parquet(files.summary)
    capacity = capacity_of_search(_ends_by_default)
    assert (capacity.loc["fcfs"].capacity_jps, capacity.loc["fcfs"].first_unmet_jps) == (4, 8)
    assert read_summary(files.summary).duration_s.nunique() == 2  # it was there all along



def test_a_load_whose_jobs_cannot_bound_the_percentile_is_no_verdict_either_way():
    """Eleven jobs well within a p90 limit cannot meet it (36 could): the load has too few jobs, not a knee."""
    from orchestrator.records.slo import Trial

    def judged(num_jobs: int):
        return search._judged_over([Trial.of_frames(*_frames(num_jobs))], SLO).state.value

    assert (judged(11), judged(40)) == ("too few jobs", "met")


def _frames(num_jobs: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    index = np.arange(num_jobs)
    jobs = pd.DataFrame({"job_index": index, "status": "completed", "arrival_at": 0.0, "finished_at": MET_S})
    requests = pd.DataFrame({"job_index": index, "status": "ok", "scheduled_at": 0.0, "first_token_at": 0.1,
                             "finished_at": MET_S, "completion_tokens": 20})  # fmt: skip
    return jobs, requests


def test_the_search_starts_where_its_cells_have_jobs_enough_and_refuses_a_range_with_none(capsys):
    from orchestrator.inputs.validation import InputError

    one_trial = GRID.model_copy(update={"trials": 1})  # 45 s windows: a p90's 36 jobs, half again, from 1.2 JPS
    moved = search._judgeable(one_trial, CapacityAsk(SLO, SearchRange(0.25, 16, 0.25)))
    assert moved.within == SearchRange(1.2, 16, 0.25)
    assert "the search starts at 1.2 JPS, not 0.25" in capsys.readouterr().out
    assert search._judgeable(one_trial, CapacityAsk(SLO, SearchRange(2, 16, 0.25))).within.jps_min == 2
    with pytest.raises(InputError, match="--jps-max 1: no load searched can meet the SLO"):
        search._judgeable(one_trial, CapacityAsk(SLO, SearchRange(0.25, 1, 0.25)))
