"""Bad input to a sweep script: one clear line, exit code 2, and nothing in the tracking store.

The messages are made in-process (``sweep_main``, the scripts' whole body), so they are checked in-process; one
case runs the real script, for what only a process shows (its exit status and its stderr alone)."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.sweep import check_writable, sweep_main
from orchestrator.inputs.validation import InputError
from orchestrator.paths import PROJECT_ROOT
from orchestrator.sweeps.cpu_tiny import SPEC

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
        (["--scale", "0"], "--scale 0: must be greater than 0"),
        (["--tool-time-s", "-1"], "--tool-time-s -1: must be 0 or more"),
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


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--dram-gb", "-5"], "--dram-gb -5: a DRAM budget must be 0 or more GiB, got -5"),
        (["--jps", "0"], "--jps 0: jobs per second must be positive, got 0"),
        (["--scale", "0"], "--scale 0: must be greater than 0"),
        (["--scale", "5"], "--scale 5: must be 4 or less"),
        (["--duration-s", "-3"], "--duration-s -3: must be greater than 0"),
        (["--tool-time-s", "-1"], "--tool-time-s -1: must be 0 or more"),
        (["--kv-blocks", "1"], "--kv-blocks 1: must be 2 or more"),
        (["--trials", "101"], "--trials 101: must be 100 or less"),
        (["--gpu-memory-utilization", "2"], "--gpu-memory-utilization 2: must be 1 or less"),
        (["--replicas", "0"], "--replicas 0: a cell has at least 1 replica, got 0"),
    ],
)  # fmt: skip
def test_a_bad_value_is_named_by_its_flag_not_by_the_specs_field(tmp_path, capsys, flags, line):
    """One line naming the flag, the value as typed and what is valid; no field path, no repeated value."""
    code, stderr = run_in_process(tmp_path, capsys, *flags)
    assert (code, stderr) == (2, f"error: {line}\n")
    assert list(tmp_path.iterdir()) == []


def test_a_results_dir_in_a_folder_that_takes_no_files_says_which_folder_and_why(tmp_path, capsys):
    """/proc takes no new file, even for root (permission is what it says to anyone else)."""
    code = sweep_main(SPEC, ["--results-dir", "/proc/kvsweep-results"])
    stderr = capsys.readouterr().err
    assert code == 2 and stderr.count("\n") == 1
    assert stderr.startswith("error: --results-dir /proc/kvsweep-results: cannot create it: /proc ")
    assert "No such file or directory" not in stderr and "valid: a directory you can write" in stderr


@pytest.mark.parametrize(
    ("error", "why"),
    [
        (errno.EACCES, "is not writable by this user (permission denied)"),
        (errno.EROFS, "is on a read-only file system"),
        (errno.ENOSPC, "is on a full disk"),
    ],
)  # fmt: skip
def test_an_unwritable_results_dir_says_why_in_one_line(tmp_path, monkeypatch, error, why):
    def refuse(self, data):
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(Path, "write_bytes", refuse)
    with pytest.raises(InputError) as new:
        check_writable(tmp_path / "new")
    assert str(new.value) == (f"--results-dir {tmp_path / 'new'}: cannot create it: {tmp_path} {why}; valid: a "
                              "directory you can write, or a new one in such a directory")  # fmt: skip
    with pytest.raises(InputError) as existing:
        check_writable(tmp_path)
    assert str(existing.value).startswith(f"--results-dir {tmp_path}: cannot write in it: it {why}; valid: ")
