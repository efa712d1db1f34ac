"""Bad input to a sweep script: one clear line, exit code 2, and nothing in the tracking store."""

import subprocess
import sys

import pytest

from orchestrator.paths import PROJECT_ROOT

SCRIPT = str(PROJECT_ROOT / "sweeps" / "cpu_tiny.py")


def run_script(tmp_path, *flags):
    command = [sys.executable, SCRIPT, "--results-dir", str(tmp_path), *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--policies", "fcfs,nope"], "unknown policy 'nope'; known: fcfs, job-fcfs, continuum"),
        (["--gpus", "X100"], "unknown GPU type 'X100'; known: B200, H200, H100, A100, L40S, L4, cpu"),
        (["--jps", "1,-3"], "jobs per second must be positive, got -3"),
        (["--jps", "fast"], "--jps takes a list of float values, got 'fast'"),
        (["--policies", "lmcache"], "policy 'lmcache' needs a CUDA GPU and cannot run on the cpu device"),
        (["--engine", "sim"], "the simulator models the cpu device only from a profile measured on this machine"),
        (["--scale", "0"], "workload.scale: Input should be greater than 0 (got 0.0)"),
        (["--tool-time-s", "-1"], "workload.tool_time_s: Input should be greater than or equal to 0 (got -1.0)"),
        (["--tool-time-s", "swe"], "--tool-time-s 'swe' is not a number, preset or JSON distribution; valid: a number, a preset (swe-agent-tool-time"),
        (["--turns", "agent-turns"], "num_turns is drawn from a int-uniform distribution; give tool_tokens as a distribution too"),
        (["--max-model-len", "2048"], "need more than max_model_len 2048 tokens (prompt and answer; the longest 3274); valid: --max-model-len 3274 or more, --max-context 2048 (drops those jobs whole, counted)"),
        (["--jps", "1e9"], "jobs per second 1e+09 over a 30 s arrival window plans about 3e+10 jobs per cell; valid: at most 20000 jobs per cell (jps <= 666.7"),
        (["--gpus", "H100", "--policies", "fcfs,lmcache", "--dram-gb", "0"], "a DRAM budget of 0 GiB gives lmcache no CPU tier"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_anything_is_tracked(tmp_path, flags, message):
    result = run_script(tmp_path, *flags)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1 and message in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_dram_budget_larger_than_the_node_is_refused_before_anything_is_tracked(ray_head, tmp_path):
    result = run_script(tmp_path, "--engine", "fake", "--dram-gb", "100000", "--ray-address", ray_head)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error: DRAM budget 100000 GiB is larger than any cpu node can give" in result.stderr
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlartifacts").exists()
