"""deploy/slurm/kvsweep.sbatch: valid bash that starts every Ray node of an allocation from the project's
virtualenv with the allocation's accelerator_type resource, and refuses bad settings before starting anything."""

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from orchestrator.gpus import GPU_TYPES
from orchestrator.paths import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "deploy" / "slurm" / "kvsweep.sbatch"
TEXT = SCRIPT.read_text()
LAUNCHER = yaml.safe_load((PROJECT_ROOT / "ray_cluster.yaml").read_text())
LAUNCHER_TYPES = {
    key.removeprefix("accelerator_type:")
    for node in LAUNCHER["available_node_types"].values()
    for key in node["resources"]
    if key.startswith("accelerator_type:")
}


def _run(tmp_path, **settings) -> subprocess.CompletedProcess:
    """The script as sbatch would run it, outside any allocation (SLURM_* removed), from a scratch directory."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    env.update(HOME=str(tmp_path), **settings)
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)


def _ray_starts() -> list[str]:
    """Each `ray start` command line of the script, its continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", TEXT)
    return [line for line in joined.splitlines() if '"$RAY" start' in line]


def test_it_is_valid_bash():
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_ray_node_starts_from_the_virtualenv_with_the_allocations_accelerator_type():
    assert re.search(r'^RAY="\$KVSWEEP_VENV/bin/ray"$', TEXT, re.M)
    starts = _ray_starts()
    assert len(starts) == 2 and sum("--head" in line for line in starts) == 1
    assert sum("--address=" in line for line in starts) == 1
    for line in starts:
        assert '--resources="$resources"' in line and "--object-store-memory=4000000000" in line
        assert "--block" in line and "--num-gpus=" in line
    assert re.search(r"^export RAY_memory_monitor_refresh_ms=0 RAY_worker_niceness=0$", TEXT, re.M)
    # A Ray job's `python` is the one on the PATH Ray was started with.
    exported = TEXT.index('export PATH="$KVSWEEP_VENV/bin:$PATH"')
    assert exported < TEXT.index('"$RAY" start')


@pytest.mark.parametrize("gpu", sorted(LAUNCHER_TYPES))
def test_the_resources_argument_is_the_json_ray_reads(gpu):
    (assignment,) = re.findall(r"^resources=.*$", TEXT, re.M)
    shell = f'GPU_TYPE={gpu}; {assignment}; printf %s "$resources"'
    printed = subprocess.run(["bash", "-c", shell], capture_output=True, text=True)
    assert json.loads(printed.stdout) == {f"accelerator_type:{gpu}": 1}


def test_it_accepts_the_gpu_types_of_the_cluster_launcher_config():
    (valid,) = re.findall(r"valid: ([A-Z0-9 ]+)\"", TEXT)
    assert set(valid.split()) == LAUNCHER_TYPES and LAUNCHER_TYPES <= set(GPU_TYPES)


def test_an_unknown_gpu_type_is_one_line_naming_the_valid_ones(tmp_path):
    result = _run(tmp_path, GPU_TYPE="B300")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "kvsweep.sbatch: GPU_TYPE=B300 is not a GPU type of the sweeps; valid: H200 H100 A100 L40S"
    ]


def test_a_relative_results_dir_is_refused(tmp_path):
    result = _run(tmp_path, RESULTS_DIR="results")
    assert result.returncode == 2 and "must be an absolute path" in result.stderr


def test_a_missing_virtualenv_is_refused_with_how_to_make_it(tmp_path):
    result = _run(tmp_path, KVSWEEP_VENV=str(tmp_path / "no-venv"), KVSWEEP_DIR=str(PROJECT_ROOT))
    assert result.returncode == 2 and "-m venv" in result.stderr and "[gpu]" in result.stderr


def test_a_model_missing_from_the_offline_cache_is_refused_before_ray_starts(tmp_path):
    result = _run(tmp_path, KVSWEEP_VENV=sys.prefix, KVSWEEP_DIR=str(PROJECT_ROOT), HF_HOME=str(tmp_path / "hf"))
    assert result.returncode == 2
    assert "meta-llama/Llama-3.1-8B-Instruct is not in the Hugging Face cache" in result.stderr


def test_with_every_setting_good_it_goes_on_to_the_allocation(tmp_path):
    """Past every check (a local model directory needs no cache), it stops only for want of Slurm."""
    model = tmp_path / "model"
    model.mkdir()
    result = _run(tmp_path, KVSWEEP_VENV=sys.prefix, KVSWEEP_DIR=str(PROJECT_ROOT), MODEL=str(model), GPU_TYPE="L40S")
    assert result.returncode == 2 and "not inside a Slurm allocation" in result.stderr


def test_dummy_weights_need_no_cache_and_a_bad_weights_setting_is_refused(tmp_path):
    empty_cache = str(tmp_path / "hf")
    dummy = _run(tmp_path, KVSWEEP_VENV=sys.prefix, KVSWEEP_DIR=str(PROJECT_ROOT), HF_HOME=empty_cache, WEIGHTS="dummy")
    assert dummy.returncode == 2 and "not inside a Slurm allocation" in dummy.stderr
    bad = _run(tmp_path, KVSWEEP_VENV=sys.prefix, KVSWEEP_DIR=str(PROJECT_ROOT), WEIGHTS="random")
    assert bad.returncode == 2 and "WEIGHTS=random; valid: real, dummy" in bad.stderr


def test_every_ray_node_starts_with_token_authentication_and_the_job_api_on_loopback():
    exported = re.search(r"^export RAY_AUTH_MODE=token$", TEXT, re.M)
    assert exported and exported.start() < TEXT.index('"$RAY" start')  # srun passes it to every node
    assert "RAY_AUTH_MODE=disabled" not in TEXT and "RAY_AUTH_TOKEN=" not in TEXT
    for line in _ray_starts():
        hosts = re.findall(r"--dashboard-host=(\S+)", line)
        assert hosts in ([], ["127.0.0.1"]), line


def test_the_token_is_made_once_readable_by_its_user_only_and_never_printed(tmp_path):
    (function,) = re.findall(r"^ensure_ray_token\(\) \{\n.*?^\}$", TEXT, re.M | re.S)
    shell = f'fail() {{ echo "$*" >&2; exit 2; }}; RAY={sys.prefix}/bin/ray; {function}; ensure_ray_token'
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_AUTH")} | {"HOME": str(tmp_path)}
    made = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, env=env, timeout=60)
    assert made.returncode == 0, made.stderr
    token = (tmp_path / ".ray" / "auth_token").read_text().strip()
    assert len(token) >= 32 and token not in made.stdout + made.stderr
    assert (tmp_path / ".ray" / "auth_token").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / ".ray").stat().st_mode & 0o777 == 0o700
    again = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, env=env, timeout=60)
    assert again.returncode == 0 and (tmp_path / ".ray" / "auth_token").read_text().strip() == token
