"""Bad input to a sweep script: one clear line, exit code 2, and nothing in the tracking store.

The messages are made in-process (``sweep_main``, the scripts' whole body), so they are checked in-process; one
case runs the real script, for what only a process shows (its exit status and its stderr alone)."""

import subprocess
import sys

import pytest

from orchestrator.paths import PROJECT_ROOT
from orchestrator.sweep.cli import sweep_main
from sweeps.cpu_tiny import SPEC

SCRIPT = str(PROJECT_ROOT / "sweeps" / "cpu_tiny.py")


def run_in_process(tmp_path, capsys, *flags) -> tuple[int, str]:
    """The script's exit code and what it printed to stderr, run in this process."""
    code = sweep_main(SPEC, ["--results-dir", str(tmp_path), *flags])
    return code, capsys.readouterr().err


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
        (["--tracking-uri", "foo://bar"], "--tracking-uri foo://bar: unknown scheme 'foo'; valid: sqlite:///PATH.db"),
        (["--slo", "jct_p90=1min"], "--slo 'jct_p90=1min': cannot read 'jct_p90=1min'; valid: comma-separated METRIC_STAT=TIME"),
        (["--gpu-budget", "2 hours"], "--gpu-budget '2 hours': '2 hours' is not a positive time; valid: a time such as 2h"),
        (["--gpu-budget", "H100=1h"], "--gpu-budget names H100, which is not among the sweep's GPU types (cpu)"),
        (["--gpu-budget", "1h", "--engine", "fake"], "on the fake engine's cpu device: the simulator predicts that device only"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2_before_anything_is_tracked(tmp_path, capsys, flags, message):
    code, stderr = run_in_process(tmp_path, capsys, *flags)
    assert code == 2
    assert stderr.startswith("error: ") and stderr.count("\n") == 1 and message in stderr
    assert list(tmp_path.iterdir()) == []


def test_the_script_itself_exits_2_with_the_one_line_on_stderr(tmp_path):
    result = subprocess.run([sys.executable, SCRIPT, "--results-dir", str(tmp_path), "--policies", "fcfs,nope"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "unknown policy 'nope'; known: fcfs, job-fcfs, continuum" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_dram_budget_larger_than_the_node_is_refused_before_anything_is_tracked(ray_cluster, tmp_path, capsys):
    """The budget is checked against the memory a connected node reports (the shared cluster's)."""
    code, stderr = run_in_process(tmp_path, capsys, "--engine", "fake", "--dram-gb", "100000", "--ray-address",
                                  ray_cluster.address)  # fmt: skip
    assert code == 2, stderr
    assert "error: DRAM budget 100000 GiB is larger than any cpu node can give" in stderr
    assert stderr.count("\n") == 1
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlartifacts").exists()
