"""Refitting a GPU type's rates from measured cells' steps moves the predictions toward the measurements, and
leaves the project's rates as they were (the refit's core, on steps an H100 half as fast as the simulator's would
take: the simulator stands in for the GPU that measured them)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from orchestrator.cell.spec import EngineKind
from orchestrator.cli.refit import repredict
from orchestrator.records.scheduler_trace_file import parquet_of_entries, trace_file_frame
from orchestrator.records.summary import summarize
from orchestrator.roofline.hardware import Device
from orchestrator.roofline.rates import RATES_FILE
from orchestrator.sim.cell_engine import cell_sim_engine
from orchestrator.sim.loop import Replicas, simulate
from orchestrator.sim.profile import step_samples
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.workload.spec import WorkloadSpec


def test_a_refit_from_a_slower_gpus_steps_brings_every_prediction_closer_and_writes_no_rates(tmp_path):
    spec = SweepSpec(name="refit", engine=EngineKind.SIM, gpus=("H100",), policies=("fcfs", "continuum"), jps=(2, 6),
                     model="llama-3.1-8b-instruct", workload=WorkloadSpec(jps=1, duration_s=20))  # fmt: skip
    twins = expand(spec)
    nominal = Device.gpu("H100")
    slower = replace(nominal, peak_flops=nominal.peak_flops / 2, memory_bytes_s=nominal.memory_bytes_s / 2)
    rates_before = RATES_FILE.read_bytes()

    def run(cell, device):
        engine = cell_sim_engine(cell.engine_setup, cell.workload, cell.cpu_profile, device)
        return simulate(cell.workload, engine, None, Replicas(seed=cell.seed))

    measured = {cell.key: run(cell, slower) for cell in twins[:2]}  # two cells "measured" on the slower GPU
    steps = []
    for number, result in enumerate(measured.values()):
        path = tmp_path / f"trace-{number}.parquet"
        path.write_bytes(parquet_of_entries(result.replica_scheduler_traces))
        steps.append(step_samples(trace_file_frame(path)))
    jct = {key: summarize(r.requests, r.jobs).jct_censored_mean_s for key, r in measured.items()}
    before = {cell.key: run(cell, nominal) for cell in twins}
    cells = [(c.key, c.label, c, summarize(before[c.key].requests, before[c.key].jobs).jct_censored_mean_s) for c in twins]
    profile, table = repredict("H100", pd.concat(steps, ignore_index=True), cells, jct, "a test")
    assert profile.error_after < profile.error_before
    both = table[table.measured]
    assert np.sqrt((both.error_after_pct**2).mean()) < np.sqrt((both.error_before_pct**2).mean()) / 2
    # The cells not measured move the way the measured ones showed: slower.
    unmeasured = table[~table.measured]
    assert (unmeasured.predicted_after_s > unmeasured.predicted_before_s).all()
    assert RATES_FILE.read_bytes() == rates_before
