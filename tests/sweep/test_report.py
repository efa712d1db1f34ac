"""The report of a partial sweep on the fake GPU cluster (an H100 up, an H200 absent): its CSVs against numbers
recomputed from the raw parquet, its marking of missing cells, and its rendering in headless Chromium."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.analysis.report import build_report
from orchestrator.sweep.runtime.driver import run_sweep
from tests.sweep.conftest import fake_spec, options

CHROMIUM_NAMES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")


@pytest.fixture(scope="module")
def partial_sweep(fake_gpu_nodes, tmp_path_factory):
    """fcfs, continuum and lmcache at two loads on H100, with H200 absent from the cluster. (One GPU type done is
    what every per-GPU table needs; placement across types is test_fake_cluster's.)"""
    results = tmp_path_factory.mktemp("results")
    grid = dict(gpus=("H100", "H200"), policies=("fcfs", "continuum", "lmcache"), jps=(2, 4), dram_gb=(1,))
    assert run_sweep(fake_spec("report", **grid), options(results)) == 0
    return results / "report"


def test_the_sweep_ends_with_its_report_also_on_the_parent_mlflow_run(partial_sweep):
    from mlflow import MlflowClient

    from orchestrator.sweep.runtime.tracking import SweepTracker, default_tracking_uri

    assert (partial_sweep / "report" / "report.html").exists()
    tracker = SweepTracker.read_only(default_tracking_uri(partial_sweep.parent), "report")
    client = MlflowClient(default_tracking_uri(partial_sweep.parent))
    logged = {artifact.path for artifact in client.list_artifacts(tracker.parent_run_id, "report")}
    assert "report/report.html" in logged
    parent = client.get_run(tracker.parent_run_id).data
    assert {key for key in parent.tags if key.startswith("verdict/")} == {
        f"verdict/H100/1GiB/{jps}jps" for jps in (2, 4)}
    assert any(key.startswith("margin_pct/H100/") for key in parent.metrics)


def test_the_report_writes_a_verdict_per_gpu_and_load_with_the_contract_columns(partial_sweep):
    table = pd.read_csv(partial_sweep / "report" / "tables" / "verdicts.csv")
    assert list(table.columns)[:11] == ["gpu", "dram_gb", "jps", "engine", "winner", "significant", "tied_with",
                                        "margin_pct", "margin_lo_pct", "margin_hi_pct", "num_trials"]  # fmt: skip
    assert sorted(zip(table.gpu, table.jps)) == [("H100", 2), ("H100", 4)]
    assert (table.num_trials == 1).all() and set(table.engine) == {"fake"}
    assert (table.winner.isin(["tie", "fcfs", "continuum", "lmcache"])).all()
    page = (partial_sweep / "report" / "report.html").read_text()
    assert "Verdicts" in page and "cannot show run-to-run spread" in page


def test_the_jct_tables_match_job_completion_times_recomputed_from_the_raw_records(partial_sweep):
    summary = pd.read_parquet(partial_sweep / "summary.parquet")
    csv = pd.read_csv(partial_sweep / "report" / "tables" / "jct_h100.csv").set_index("jps")
    done = summary[(summary.gpu == "H100") & (summary.status == "done")]
    assert len(done) == 6
    for cell in done.itertuples():
        jobs = pd.read_parquet(partial_sweep / "cells" / cell.cell_key / "jobs.parquet")
        recomputed = (jobs.finished_at - jobs.arrival_at)[jobs.status == "completed"].mean()
        assert csv.loc[cell.jps, cell.policy] == pytest.approx(recomputed, rel=1e-9)


def test_missing_cells_are_blank_in_the_csv_marked_in_the_page_and_listed_with_the_reason(partial_sweep):
    h200 = pd.read_csv(partial_sweep / "report" / "tables" / "jct_h200.csv")
    assert list(h200.jps) == [2, 4] and h200[["fcfs", "continuum", "lmcache"]].isna().all().all()
    missing = pd.read_csv(partial_sweep / "report" / "tables" / "missing.csv")
    assert len(missing) == 6 and set(missing.gpu) == {"H200"} and set(missing.status) == {"pending"}
    page = (partial_sweep / "report" / "report.html").read_text()
    assert "no H200 in the cluster and none its autoscaler can launch" in page and "—" in page
    assert "fake engine: orchestration check, not a measurement" in page  # never passed off as measured


def test_the_cpu_tier_diagnosis_is_computed_from_the_cells_offload_counters(partial_sweep):
    # The fake engine's stand-in tier writes 1 KiB per prompt token and reads nothing back.
    tier = pd.read_csv(partial_sweep / "report" / "tables" / "cpu_tier_h100.csv")
    summary = pd.read_parquet(partial_sweep / "summary.parquet").set_index("cell_key")
    assert len(tier) == 6 and set(tier.verdict) == {"a very busy /dev/null"} and (tier.read_gib == 0).all()
    written = summary[(summary.gpu == "H100") & (summary.status == "done")].kv_offload_store_bytes / 2**30
    assert sorted(tier.written_gib) == pytest.approx(sorted(written))


def test_a_second_sweep_is_shown_side_by_side(partial_sweep, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(partial_sweep, other)
    summary = pd.read_parquet(other / "summary.parquet").assign(sweep="other")
    summary["jct_mean_s"] *= 2
    summary.to_parquet(other / "summary.parquet")
    path = build_report(partial_sweep, out_dir=tmp_path / "out", compare=other)
    side_by_side = pd.read_csv(tmp_path / "out" / "tables" / "compare_jct_h100.csv").set_index("jps")
    assert list(side_by_side.columns) == [f"{policy} ({sweep})" for sweep in ("report", "other")
                                          for policy in ("continuum", "fcfs", "lmcache")]  # fmt: skip
    assert (side_by_side["fcfs (other)"] == 2 * side_by_side["fcfs (report)"]).all()
    assert "report against other" in path.read_text()


CHROMIUM_FLAGS = ("--no-sandbox", "--disable-gpu", "--hide-scrollbars")


def headless_chromium() -> str:
    chromium = next((shutil.which(name) for name in CHROMIUM_NAMES if shutil.which(name)), None)
    assert chromium, f"no headless Chromium ({', '.join(CHROMIUM_NAMES)}); `make test` installs one"
    return chromium


def rendered_dom(page: Path) -> str:
    """The page's DOM after headless Chromium loaded it."""
    command = [headless_chromium(), *CHROMIUM_FLAGS, "--dump-dom", page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120).stdout


def test_the_report_renders_in_headless_chromium_with_its_tables_and_figures(partial_sweep, tmp_path):
    url = (partial_sweep / "report" / "report.html").as_uri()
    flags = list(CHROMIUM_FLAGS)
    chromium = headless_chromium()
    dom = rendered_dom(partial_sweep / "report" / "report.html")
    assert len(re.findall(r"<table", dom)) >= 10  # per GPU: JCT, per-turn, cached, health, lifecycles; overview
    figures = re.findall(r'<img alt="([^"]*)" src="data:image/png;base64,', dom)
    for caption in ("Winner per load", "H100: mean job time against load", "H100: per-turn latency",
                    "H100: cached fraction per turn"):
        assert any(figure.startswith(caption) for figure in figures), (caption, figures)
    screenshot = tmp_path / "report.png"
    subprocess.run([chromium, *flags, "--window-size=1400,3000", f"--screenshot={screenshot}", url],
                   capture_output=True, timeout=120, check=True)  # fmt: skip
    header = screenshot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24]) == (1400, 3000)
