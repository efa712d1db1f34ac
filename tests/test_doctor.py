"""The doctor: its pure verdicts, and the real thing on this machine (the CPU engine's subset)."""

import os
import subprocess
import sys

import pytest

from orchestrator.checks import _driver_check, format_table
from orchestrator.doctor import doctor_cells, not_checked_here
from orchestrator.paths import PROJECT_ROOT
from orchestrator.records.cell import NodeStack


def stack(cuda, driver):
    return NodeStack(vllm="0.32.0", lmcache="0.5.6", torch="2.13.0", cuda=cuda, driver=driver, lmcache_ops_error=None)


def test_a_driver_older_than_the_cuda_runtime_of_torch_fails():
    assert _driver_check("H100", stack("13.0", "580.65.06")).ok
    old = _driver_check("H100", stack("13.0", "570.124.06"))
    assert old.ok is False and old.detail == "driver 570.124.06 for CUDA 13.0 (needs >= 580)"
    assert _driver_check("H100", stack("12.8", "570.124.06")).ok
    assert _driver_check("H100", stack(None, None)).ok is False  # a CPU build of torch on a GPU node


def test_short_cells_cover_each_policy_with_a_tier_only_where_one_is_used():
    cells = doctor_cells("H100", ("fcfs", "lmcache"), "meta-llama/Llama-3.1-8B-Instruct", 5)
    assert [(c.policy, c.dram_gb, c.workload.scale) for c in cells] == [("fcfs", 16, 1.0), ("lmcache", 16, 1.0)]
    cpu = doctor_cells("cpu", ("fcfs", "continuum"), "tiny", 5)
    assert {c.dram_gb for c in cpu} == {0} and cpu[0].engine_options.num_kv_blocks == 2400


def test_the_table_says_what_was_not_checked():
    table = format_table(not_checked_here(["cpu"]))
    assert "H100    everything       not checked  no node of this type checked" in table
    assert "GPU-only checks" in table


@pytest.mark.engine
def test_the_doctor_runs_here_and_prints_its_table():
    # Continuum alone: its cell shows the most (pins carried, a reset proven clean); an fcfs cell would add
    # a replica start and a minute to the suite and check the same paths.
    command = [sys.executable, "-m", "orchestrator.doctor", "--policies", "continuum", "--duration-s", "3"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=PROJECT_ROOT,
                            env={**os.environ, "RAY_ADDRESS": ""})  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = {tuple(line.split()[:2]): line for line in result.stdout.splitlines() if line.startswith("cpu ")}
    for check in ("serving", "vllm", "weights", "cell", "reset"):
        assert any(name == check and " ok " in line for (_, name), line in rows.items()), f"no ok {check} row"
    assert "continuum did its job  ok" in result.stdout and "pins carried a job's KV to its next turn" in result.stdout
    assert "proven clean: canary hit" in result.stdout and " 0 after" in result.stdout
    assert "H100    everything" in result.stdout and "doctor: 0 failed" in result.stdout
