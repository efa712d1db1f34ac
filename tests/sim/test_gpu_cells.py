"""Every measured GPU cell of a committed run is read back as the simulator takes it: the H200's pressure run of
2026-11-27 (two calls, their cells packed in each call's archive) and the H100's capacity run (cells kept outside any
archive, with no trace)."""

from __future__ import annotations

import json

import pytest

from orchestrator.records.layout import CELL_CONFIG_FILE, JOBS_FILE, REQUESTS_FILE
from orchestrator.sim.gpu_cells import GPU_RUNS_DIR, RunId, gpu_cell, read_runs, run_dirs

H200_PRESSURE = GPU_RUNS_DIR / "2026-11-27-H200"
H100_CAPACITY = GPU_RUNS_DIR / "2026-11-27-H100-capacity"


@pytest.fixture(scope="module")
def h200_cells():
    return {cell.key: cell for cell in read_runs([H200_PRESSURE])}


def test_every_cell_of_both_calls_is_read_with_its_run_and_call(h200_cells):
    assert sorted(h200_cells) == [
        "2026-11-27-H200/call-1/pressure/fcfs", "2026-11-27-H200/call-1/pressure/lmcache",
        "2026-11-27-H200/call-1/pressure/native-offload", "2026-11-27-H200/call-2/pressure/continuum",
        "2026-11-27-H200/call-2/pressure/fcfs",
    ]  # fmt: skip
    lmcache = h200_cells["2026-11-27-H200/call-1/pressure/lmcache"]
    assert lmcache.run == RunId("2026-11-27-H200", 1)
    assert (lmcache.gpu, lmcache.policy) == ("H200", "lmcache")


def test_a_cell_carries_what_its_engine_was_asked_for_and_what_it_measured(h200_cells):
    fcfs = h200_cells["2026-11-27-H200/call-1/pressure/fcfs"]
    setup = fcfs.setup
    assert (setup.num_kv_blocks, setup.max_num_seqs, setup.block_size) == (2750, 128, 16)
    assert (fcfs.workload.jps, fcfs.workload.duration_s, fcfs.workload.seed) == (1.8, 10.0, 42)
    assert len(fcfs.jobs) == 24 and len(fcfs.requests) == 192
    assert fcfs.jct_mean_s == pytest.approx(22.40, abs=0.005)  # the run's page: 22.40 s
    assert fcfs.steps_in_flight == 2  # its asynchronous scheduler class
    assert (fcfs.scheduler_trace.kind == "step").sum() > 900
    native = h200_cells["2026-11-27-H200/call-1/pressure/native-offload"]
    assert native.tier_counters.external_prefix_cache_hits == 829_888  # the run's page
    assert "Stored" in h200_cells["2026-11-27-H200/call-1/pressure/lmcache"].server_log
    assert fcfs.schedule_fingerprint is not None and native.schedule_fingerprint == fcfs.schedule_fingerprint


def test_cells_kept_outside_the_archives_are_read_without_a_call_or_trace():
    cells = {cell.name: cell for cell in read_runs([H100_CAPACITY])}
    assert len(cells) == 6
    native = cells["cells/native-offload-2.985jps"]
    assert native.run == RunId("2026-11-27-H100-capacity", None)
    assert native.scheduler_trace is None and native.server_log == ""
    assert native.jct_mean_s == pytest.approx(24.13, abs=0.01)


def test_only_done_cells_of_a_real_engine_are_kept(h200_cells):
    payload = json.loads((H100_CAPACITY / "cells" / "fcfs-1.241jps" / CELL_CONFIG_FILE).read_text())
    files = {name: (H100_CAPACITY / "cells" / "fcfs-1.241jps" / name).read_bytes() for name in (JOBS_FILE, REQUESTS_FILE)}
    run = RunId(H100_CAPACITY.name, None)
    assert gpu_cell(run, "x", files | {CELL_CONFIG_FILE: json.dumps(payload).encode()}) is not None
    for changed in ({"status": "failed"}, {"cell": payload["cell"] | {"engine": "sim"}}):
        assert gpu_cell(run, "x", files | {CELL_CONFIG_FILE: json.dumps(payload | changed).encode()}) is None


def test_the_runs_on_record_are_the_dated_folders():
    names = [path.name for path in run_dirs()]
    assert {"2026-11-27-H100", "2026-11-27-H200", "2026-11-27-H100-capacity"} <= set(names)
    assert names == sorted(names)


def test_a_folder_that_is_no_run_is_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="not a GPU run's folder") as error:
        read_runs([tmp_path])
    assert "\n" not in str(error.value)
