"""Result files written under the older names of their counts read under the current ones."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd

from orchestrator.cell.cell_json import cell_config
from orchestrator.paths import PROJECT_ROOT
from orchestrator.records.names import read_summary
from orchestrator.records.verdict import CSV_COLUMNS, TOO_CLOSE, Verdict, VerdictKind, read_verdicts, verdict_frame


def test_a_summary_with_n_columns_reads_under_the_num_names(tmp_path):
    path = tmp_path / "summary.parquet"
    pd.DataFrame({"cell_key": ["a"], "n_jobs": [24], "n_completed": [23], "t8_mean_s": [1.5]}).to_parquet(path)
    read = read_summary(path)
    assert list(read.columns) == ["cell_key", "num_jobs", "num_completed", "t_last_mean_s"]
    assert read.num_completed.tolist() == [23]
    assert list(read_summary(path, columns=["num_jobs"]).columns) == ["num_jobs"]


def test_a_verdicts_csv_with_n_trials_and_n_jobs_reads_the_same(tmp_path):
    verdict = Verdict(gpu="H100", dram_gb=32, jps=1.8, engine="sim", kind=VerdictKind.WIN, leader="continuum",
                      tied_with=(), margin_pct=39.0, margin_lo_pct=33.7, margin_hi_pct=44.2, num_trials=2,
                      num_jobs=24)  # fmt: skip
    assert "num_trials" in CSV_COLUMNS
    path = tmp_path / "verdicts.csv"
    verdict_frame([verdict]).rename(columns={"num_trials": "n_trials", "num_jobs": "n_jobs"}).to_csv(path, index=False)
    [read] = read_verdicts(path)
    assert (read.num_trials, read.num_jobs, read.in_words()) == (2, 24, verdict.in_words())


def test_a_cell_json_a_gpu_run_wrote_with_n_preemptions_reads_its_count():
    path = PROJECT_ROOT / "docs/gpu-runs/2026-11-27-H100-capacity/cells/fcfs-1.241jps/cell.json"
    written = json.loads(path.read_text())
    assert "n_preemptions" in written and "num_preemptions" not in written
    assert cell_config(written).num_preemptions == written["n_preemptions"]


def test_a_verdicts_csv_from_before_the_within_error_field_reads_it_from_the_note(tmp_path):
    too_close = Verdict(gpu="H100", dram_gb=400, jps=10, engine="sim", kind=VerdictKind.TIE, leader="continuum",
                        tied_with=("continuum", "lmcache"), margin_pct=24.9, margin_lo_pct=22.9, margin_hi_pct=26.9,
                        num_trials=1, note=f"{TOO_CLOSE} (within the simulator's error); measure continuum, lmcache",
                        within_sim_error=True)  # fmt: skip
    path = tmp_path / "verdicts.csv"
    verdict_frame([too_close]).to_csv(path, index=False)
    assert read_verdicts(path)[0].within_sim_error
    verdict_frame([too_close]).drop(columns="within_sim_error").to_csv(path, index=False)
    assert read_verdicts(path)[0].within_sim_error
    verdict_frame([replace(too_close, note="", within_sim_error=False)]).to_csv(path, index=False)
    assert not read_verdicts(path)[0].within_sim_error
