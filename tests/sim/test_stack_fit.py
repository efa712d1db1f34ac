"""An engine stack's fit gives back the constants that made its cells: cells simulated with known constants (a
roofline, LMCache's step work, the API server's time per request, native offload's load jobs) stand in for measured
ones, and each stage finds its constants again. Leaving a run out fits on every other run's cells only, and the
comparisons pair a policy with its rival on the same jobs of one call."""

from __future__ import annotations

import tomllib
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from orchestrator.policies.engine_setup import EngineOptions, engine_setup
from orchestrator.records.cell import TierCounters
from orchestrator.records.intervals import Interval
from orchestrator.records.scheduler_trace_file import trace_frame
from orchestrator.records.schema import to_row
from orchestrator.roofline.hardware import Calibration
from orchestrator.sim import stack_fit
from orchestrator.sim.cell_engine import cell_sim_engine
from orchestrator.sim.gpu_cells import GPU_RUNS_DIR, GpuCell, RunId, read_runs
from orchestrator.sim.loop import simulate
from orchestrator.workload.schedule import schedule_for
from orchestrator.workload.spec import WorkloadSpec

MODEL = "llama-3.1-8b-instruct"
KNOWN = Calibration(compute_efficiency=0.7, hbm_efficiency=0.6, step_overhead_s=0.001, seq_overhead_s=3e-5,
                    request_overhead_s=0.02, lmcache_save_step_s=0.0, lmcache_save_chunk_s=0.0)  # fmt: skip
PROMPT_STEP_S = 0.008
LOAD_JOB_S = 0.05
STORE_S = 0.004
PRESSURE = {"num_kv_blocks": 1500, "max_num_seqs": 128}  # a pool the cells overflow, so that their tier serves


def simulated_cell(run: str, gpu: str, policy: str, seed: int, calibration: Calibration, **options) -> GpuCell:
    """A cell simulated with ``calibration``, recorded as a measured one (its trace one step in flight)."""
    workload = WorkloadSpec(jps=1.8, duration_s=4, seed=seed)
    setup = engine_setup(EngineOptions(**options), model=MODEL, policy=policy, gpu=gpu, tp=1,
                         dram_gb=32.0 if policy != "fcfs" else 0.0)  # fmt: skip
    result = simulate(workload, cell_sim_engine(setup, workload, calibration=calibration))
    return GpuCell(run=RunId(run, 1), name=f"cells/{policy}-{seed}", setup=setup, workload=workload,
                   schedule_fingerprint=schedule_for(workload).fingerprint(),
                   jobs=pd.DataFrame([to_row(job) for job in result.jobs]),
                   requests=pd.DataFrame([to_row(request) for request in result.requests]),
                   scheduler_trace=trace_frame(result.scheduler_trace_bytes()), server_log="", server_argv=(),
                   tier_counters=TierCounters(), num_preemptions=result.stats.num_preemptions)  # fmt: skip


@pytest.fixture(scope="module")
def known_cells() -> list[GpuCell]:
    costs = KNOWN.with_values(lmcache_prompt_step_s=PROMPT_STEP_S, native_load_job_s=LOAD_JOB_S, simple_store_s=STORE_S)
    return [simulated_cell("run-a", "H100", "fcfs", 1, costs), simulated_cell("run-b", "H200", "fcfs", 2, costs),
            simulated_cell("run-b", "H200", "fcfs", 3, costs, **PRESSURE),
            simulated_cell("run-a", "H100", "lmcache", 4, costs, **PRESSURE),
            simulated_cell("run-a", "H100", "native-offload", 5, costs, **PRESSURE),
            simulated_cell("run-b", "H200", "simple-offload", 6, costs)]  # fmt: skip


def test_the_roofline_comes_back_from_the_steps(known_cells):
    fitted = stack_fit.fit_roofline(stack_fit.roofline_steps(known_cells), Calibration.load())
    for name in stack_fit.ROOFLINE_BOUNDS:
        assert getattr(fitted, name) == pytest.approx(getattr(KNOWN, name), rel=0.02), name
    assert max(stack_fit.step_errors(stack_fit.roofline_steps(known_cells), fitted).values()) < 0.005


def test_lmcache_step_work_comes_back_from_its_trace_beyond_the_roofline(known_cells):
    assert stack_fit.fit_lmcache(known_cells, KNOWN).lmcache_prompt_step_s == pytest.approx(PROMPT_STEP_S, rel=0.02)


def test_lmcache_store_and_retrieve_costs_come_back_from_its_log():
    lines = [f"LMCache INFO: [req_id=r{n}] Stored {tokens} out of total {tokens} tokens. size: 0.1 GB, cost "
             f"{0.5 + 1.1 * (tokens // 256):.4f} ms, throughput: 25 GB/s; offload_time: 1 ms, put_time: 0.05 ms"
             for n, tokens in enumerate([256, 768, 1536, 2816, 4096])]  # fmt: skip
    lines += [f"LMCache INFO: [req_id=r{n}] Retrieved {tokens} out of {tokens} required tokens (from {tokens} total "
              f"tokens). size: 0.3 gb, cost {0.4 * (tokens // 256):.4f} ms, throughput: 70 GB/s;"
              for n, tokens in enumerate([1536, 5632, 3072])]  # fmt: skip
    stores, retrieves = stack_fit.logged_work("\n".join(lines))
    assert stack_fit.per_chunk_cost(stores) == pytest.approx((0.5e-3, 1.1e-3), rel=1e-6)
    assert stack_fit.per_chunk_cost(retrieves) == pytest.approx((0.0, 0.4e-3), abs=1e-9)


def test_the_latencies_come_back_from_mean_job_times(known_cells):
    fitted = stack_fit.fit_stack(known_cells)
    assert fitted.request_overhead_s == pytest.approx(KNOWN.request_overhead_s, abs=0.002)
    assert fitted.native_load_job_s == pytest.approx(LOAD_JOB_S, abs=0.01)
    assert fitted.simple_store_s == pytest.approx(STORE_S, abs=0.001)


@pytest.mark.parametrize("policy", ["lmcache", "native-offload", "simple-offload"])
def test_a_connectors_costs_lengthen_its_own_tiers_jobs_and_no_others(known_cells, policy):
    cell = next(cell for cell in known_cells if cell.policy == policy)

    def finished(calibration: Calibration) -> list:
        engine = cell_sim_engine(cell.setup, cell.workload, calibration=calibration)
        return [job.finished_at for job in simulate(cell.workload, engine).jobs]

    plain = finished(KNOWN)
    lmcache_costs = finished(KNOWN.with_values(lmcache_prompt_step_s=0.01, lmcache_store_s=0.002))
    native_costs = finished(KNOWN.with_values(native_load_job_s=0.05))
    simple_costs = finished(KNOWN.with_values(simple_store_s=0.01))
    assert (lmcache_costs != plain) == (policy == "lmcache")
    assert (native_costs != plain) == (policy == "native-offload")  # the simple cell here loads nothing
    assert (simple_costs != plain) == (policy == "simple-offload")


def test_leaving_a_run_out_fits_on_every_other_run_and_predicts_its_cells(known_cells):
    seen = []

    def fit(cells):
        seen.append(sorted({cell.run.run for cell in cells}))
        return KNOWN

    folds = stack_fit.leave_one_run_out(known_cells, fit, lambda cell, stack: pd.Series([1.0]))
    assert [fold.run for fold in folds] == ["run-a", "run-b"] and seen == [["run-b"], ["run-a"]]
    assert sorted(key for fold in folds for key in fold.job_times) == sorted(cell.key for cell in known_cells)
    assert all(key.startswith(fold.run) for fold in folds for key in fold.job_times)


def test_a_policy_is_compared_with_its_rival_on_the_same_jobs_of_its_own_call():
    cells = read_runs([GPU_RUNS_DIR / "2026-11-27-H200"])
    pairs = {(c.label, c.cell.policy, c.rival.policy): c.rival.run.label for c in stack_fit.comparisons(cells)}
    assert pairs == {("2026-11-27-H200/call-1", "lmcache", "fcfs"): "2026-11-27-H200/call-1",
                     ("2026-11-27-H200/call-1", "native-offload", "fcfs"): "2026-11-27-H200/call-1",
                     ("2026-11-27-H200/call-1", "native-offload", "lmcache"): "2026-11-27-H200/call-1",
                     ("2026-11-27-H200/call-2", "continuum", "fcfs"): "2026-11-27-H200/call-2"}  # fmt: skip


def test_a_measured_win_is_missed_by_a_simulated_tie_and_a_measured_tie_called_by_one(known_cells):
    policy, rival = known_cells[1], known_cells[2]  # one H200 run, its jobs' times stood in below
    times = {policy.key: pd.Series(10.0, index=policy.job_times.index),
             rival.key: pd.Series(10.05, index=policy.job_times.index)}  # a simulated margin of 0.5%: too close
    won = stack_fit.Comparison("run-b/call-1", policy, rival, Interval(3.0, 1.0, 5.0))
    tied = replace(won, measured=Interval(1.0, -0.5, 2.5))
    assert won.measured_call == "win" and won.simulated_call(times) == "tie" and not won.predicted(times)
    assert tied.measured_call == "tie" and tied.predicted(times)


def test_the_stacks_file_is_a_calibration_with_its_sources_provenance_and_bands(known_cells, tmp_path):
    calibration = KNOWN.with_values(step_overhead_s=0.0, lmcache_prompt_step_s=PROMPT_STEP_S, native_load_job_s=0.05)
    text = stack_fit.stack_toml(calibration, stack_fit.Provenance.of(known_cells), {"fcfs": 0.04, "lmcache": 0.07},
                                "vllm-9.9", "kvsweep calibrate --stack vllm-9.9 run-a run-b")  # fmt: skip
    (tmp_path / "vllm-9.9.toml").write_text(text)
    assert Calibration.load(tmp_path / "vllm-9.9.toml") == calibration
    document = tomllib.loads(text)
    assert document["stack"]["runs"] == ["run-a", "run-b"] and document["stack"]["gpus"] == ["H100", "H200"]
    assert document["held_out"] == {"fcfs": 0.04, "lmcache": 0.07}
    assert "step_overhead_s = 0  # the same fit (at the lower bound of its range)" in text
    assert np.isclose(document["calibration"]["compute_efficiency"], 0.7)
