"""Verdicts on real data: the CPU vLLM engine, fcfs against Continuum with three trials at a light and a
saturating load. The intervals come from the trials (Student t); at the saturating load Continuum's
pins keep prefix hits that FCFS's LRU loses and the verdict is significant; every cell's run carries its
own interval over its jobs."""

from __future__ import annotations

import pandas as pd
import pytest

from orchestrator.records.layout import SweepFiles
from orchestrator.sweep.driver import run_sweep
from orchestrator.sweep.spec import EngineKind, EngineOptions, RunLimits, SweepSpec
from orchestrator.workload.spec import WorkloadSpec
from tests.sweep.conftest import options

pytestmark = pytest.mark.engine

SPEC = SweepSpec(
    name="cpu-verdicts",
    engine=EngineKind.VLLM,
    gpus=("cpu",),
    policies=("fcfs", "continuum"),
    jps=(1, 6),
    trials=3,
    workload=WorkloadSpec(jps=1, duration_s=12, scale=0.25, request_timeout_s=300, job_timeout_s=600),
    engine_options=EngineOptions(num_kv_blocks=2400),
    limits=RunLimits(health_timeout_s=300, hang_timeout_s=120, client_actors=0),
)


@pytest.fixture(scope="module")
def results(local_ray, tmp_path_factory) -> SweepFiles:
    directory = tmp_path_factory.mktemp("results")
    assert run_sweep(SPEC, options(directory)) == 0
    return SweepFiles(directory / SPEC.name)


def test_three_trials_give_intervals_and_a_significant_verdict_at_the_saturating_load(results):
    verdicts = pd.read_csv(results.verdicts).set_index("jps")
    assert list(verdicts.n_trials) == [3, 3] and set(verdicts.engine) == {"vllm"}
    heavy = verdicts.loc[6]
    assert heavy.winner == "continuum" and heavy.significant and heavy.margin_lo_pct > 1
    assert heavy.margin_lo_pct < heavy.margin_pct < heavy.margin_hi_pct
    stats = pd.read_csv(results.report / "tables" / "policy_stats.csv")
    assert (stats.jct_lo_s < stats.jct_mean_s).all() and (stats.jct_mean_s < stats.jct_hi_s).all()
    assert (stats.n_trials == 3).all() and stats.n_preemptions.notna().all()


def test_every_cell_carries_its_own_interval_over_its_jobs(results):
    summary = pd.read_parquet(results.summary)
    assert len(summary) == 2 * 2 * 3 and set(summary.status) == {"done"} and summary.seed.nunique() == 3
    assert (summary.jct_censored_lo_s <= summary.jct_censored_mean_s).all()
    assert (summary.jct_censored_mean_s <= summary.jct_censored_hi_s).all()
