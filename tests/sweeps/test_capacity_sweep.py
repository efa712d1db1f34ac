"""The capacity search end to end on the simulator (in this process, on the test process's Ray cluster, with a real
MLflow store): every policy's capacity is a load its cells meet the SLO at, with the next load searched not met; a
fleet is the fewest replicas whose simulated cell meets it at the target; cost follows the price; the report opens
with the answer; a re-run runs nothing again. Bad input is one line before anything is made."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from orchestrator.sweep.runtime.tracking import default_tracking_uri
from orchestrator.sweeps.capacity import main
from tests.sweep.conftest import runs_by_key

SWEEP = "capacity"
PRICE = 4.0
TARGET = 12.0
# Asked from 1 JPS, the search starts at 2.7: over 20 s of arrivals, the lowest load whose cells expect half again
# the 36 jobs that bound a p90 (orchestrator/capacity/plan.py).
JPS_MIN, JUDGEABLE_FROM = 1, 2.7
FLAGS = ["--slo", "jct_p90=60s", "--gpu", "H200", "--policies", "fcfs,continuum", "--duration-s", "20", "--jps-min",
         str(JPS_MIN), "--jps-max", "16", "--resolution", "1", "--traffic-jps", str(TARGET), "--routers",
         "session-affinity", "--gpu-price", f"H200={PRICE:g}", "--progress-interval-s", "60"]  # fmt: skip


@pytest.fixture(scope="module")
def searched(ray_cluster, tmp_path_factory):
    results = tmp_path_factory.mktemp("capacity")
    assert main(["--results-dir", str(results), "--ray-address", ray_cluster.address, *FLAGS]) == 0
    return results


def _met(summary: pd.DataFrame, policy: str, jps: float, replicas: int = 1) -> str:
    (row,) = summary[(summary.policy == policy) & np.isclose(summary.jps, jps) & (summary.replicas == replicas)
                     & (summary.status == "done")].itertuples()  # fmt: skip
    return row.slo_met


def test_each_capacity_is_met_by_its_cell_and_the_next_load_searched_is_not(searched):
    capacity = pd.read_csv(searched / SWEEP / "capacity.csv")
    summary = pd.read_parquet(searched / SWEEP / "summary.parquet")
    assert list(capacity.policy) == ["fcfs", "continuum"] and set(summary.slo.dropna()) == {"jct_p90=60s"}
    for row in capacity.itertuples():
        assert JUDGEABLE_FROM <= row.capacity_jps < row.first_unmet_jps <= 16 and row.first_unmet_jps - row.capacity_jps <= 1
        assert _met(summary, row.policy, row.capacity_jps) == "met"
        assert _met(summary, row.policy, row.first_unmet_jps) == row.at_first_unmet != "met"
        assert row.cost_per_1k_jobs == pytest.approx(PRICE / (row.capacity_jps * 3600) * 1000)
        assert row.goodput_lo_jps <= row.goodput_jps <= row.capacity_jps


def test_a_fleet_is_the_fewest_replicas_whose_simulated_cell_meets_the_slo_at_the_target(searched):
    fleet = pd.read_csv(searched / SWEEP / "fleet.csv")
    summary = pd.read_parquet(searched / SWEEP / "summary.parquet")
    assert list(fleet.policy) == ["fcfs", "continuum"]
    for row in fleet.itertuples():
        assert row.first_guess == math.ceil(TARGET / row.capacity_jps) and row.gpus == row.replicas
        assert _met(summary, row.policy, TARGET, row.replicas) == "met"
        if row.replicas > 1:
            assert _met(summary, row.policy, TARGET, row.replicas - 1) != "met"
        assert row.cost_per_1k_jobs == pytest.approx(PRICE * row.gpus / (TARGET * 3600) * 1000)


def test_the_report_opens_with_the_capacity_and_mlflow_has_each_cells_goodput(searched):
    page = (searched / SWEEP / "report" / "report.html").read_text()
    assert page.index("Capacity under the SLO") < page.index("Verdicts")
    assert f"For {TARGET:g} JPS at jct_p90=60s, " in page and "Cheapest for 12 JPS" in page
    from mlflow import MlflowClient

    run_id = next(iter(runs_by_key(searched, SWEEP).values()))[-1].run_id
    run = MlflowClient(default_tracking_uri(searched)).get_run(run_id)
    assert run.data.tags["slo"] == "jct_p90=60s" and run.data.tags["slo_met"] in ("met", "missed", "unsure")
    assert "goodput_jps" in run.data.metrics and "good_pct" in run.data.metrics


def test_a_re_run_finds_every_cell_done_and_gives_the_same_answer(searched, ray_cluster, capsys):
    before = {key: len(runs) for key, runs in runs_by_key(searched, SWEEP).items()}
    capacity = pd.read_csv(searched / SWEEP / "capacity.csv")
    assert main(["--results-dir", str(searched), "--ray-address", ray_cluster.address, *FLAGS]) == 0
    assert {key: len(runs) for key, runs in runs_by_key(searched, SWEEP).items()} == before
    assert pd.read_csv(searched / SWEEP / "capacity.csv").equals(capacity)
    assert "0 to run" in capsys.readouterr().out


@pytest.mark.parametrize(("flags", "message"), [
    (["--gpu", "H200"], "--slo is required"),
    (["--slo", "jct_p90=60s", "--gpu", "H200", "--gpu-price", "H100=2"], "'H100' is not a GPU type of this search"),
    (["--slo", "jct_p90=60s", "--gpu", "H200", "--traffic-load", "2"], "--traffic-load multiplies a trace's own"),
    (["--slo", "jct_p90=60s", "--gpu", "H200", "--jps-min", "5", "--jps-max", "2"], "valid is 0 < jps-min < jps-max"),
])  # fmt: skip
def test_bad_input_is_one_line_before_anything_is_made(tmp_path, capsys, flags, message):
    assert main(["--results-dir", str(tmp_path / "results"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert not (tmp_path / "results").exists()
