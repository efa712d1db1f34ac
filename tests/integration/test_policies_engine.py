"""FCFS against Continuum on one identical schedule, on the real CPU engine with a constrained KV pool.

At 6 JPS (scale 0.25) the 2400 x 32-token pool cannot hold every job in flight: FCFS's LRU prefix cache
loses most hits and latency spirals, while Continuum's pins keep each admitted job's context. At 1 JPS
everything fits and the two policies measure the same.
"""

from __future__ import annotations

import pytest

from orchestrator.cell_runner import run_cell
from orchestrator.policies import get_policy
from orchestrator.replica.vllm_server import VllmEngineConfig
from orchestrator.workload.client import RequestOptions
from orchestrator.workload.plan import build_plan
from orchestrator.workload.spec import WorkloadSpec

pytestmark = pytest.mark.engine

KV_BLOCKS = 2400
LATER_TURNS = range(3, 9)


def _run(policy_name, plan, model_dir, out):
    policy = get_policy(policy_name)
    base = VllmEngineConfig(model=str(model_dir), served_model_name="tiny", num_kv_blocks=KV_BLOCKS)
    options = RequestOptions(model="tiny", send_priority=policy.job_priority)
    return run_cell(policy.engine_config(base, dram_gb=0), plan, out, options)


def _cached_of_best(summary, turns) -> float:
    """Token-weighted cached / best over ``turns``."""
    cached = sum(summary.turn(t).cached_fraction * summary.turn(t).prompt_tokens_mean for t in turns)
    best = sum(summary.turn(t).best_cached_fraction * summary.turn(t).prompt_tokens_mean for t in turns)
    return cached / best


@pytest.fixture(scope="module")
def saturating(tiny_model_dir, tiny_counter, tmp_path_factory):
    plan = build_plan(WorkloadSpec(jps=6, duration_s=30, scale=0.25, seed=42), tiny_counter)
    return {name: _run(name, plan, tiny_model_dir, tmp_path_factory.mktemp(name)) for name in ("fcfs", "continuum")}


@pytest.fixture(scope="module")
def low_load(tiny_model_dir, tiny_counter, tmp_path_factory):
    plan = build_plan(WorkloadSpec(jps=1, duration_s=10, scale=0.25, seed=42), tiny_counter)
    return {name: _run(name, plan, tiny_model_dir, tmp_path_factory.mktemp(name)) for name in ("fcfs", "continuum")}


def test_at_saturation_fcfs_loses_most_prefix_hits(saturating):
    assert _cached_of_best(saturating["fcfs"].summary, LATER_TURNS) < 0.5


def test_at_saturation_continuum_keeps_ninety_percent_of_the_best_on_every_later_turn(saturating):
    summary = saturating["continuum"].summary
    assert summary.num_completed == summary.num_jobs
    for turn in LATER_TURNS:
        assert summary.turn(turn).cached_of_best >= 0.9, summary.turn(turn)


def test_at_saturation_continuum_finishes_jobs_faster_than_fcfs(saturating):
    assert saturating["continuum"].summary.jct_mean_s < saturating["fcfs"].summary.jct_mean_s


def test_at_low_load_the_policies_measure_the_same(low_load):
    fcfs, continuum = low_load["fcfs"].summary, low_load["continuum"].summary
    assert continuum.jct_mean_s == pytest.approx(fcfs.jct_mean_s, rel=0.15)
    for turn in LATER_TURNS:
        assert continuum.turn(turn).cached_of_best >= 0.9 and fcfs.turn(turn).cached_of_best >= 0.9
