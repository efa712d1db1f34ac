"""ray_cluster.yaml is a valid Ray cluster-launcher config and declares what the sweep relies on."""

import copy
import os
import re
import shutil
import stat
import subprocess
import tomllib

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from orchestrator.gpus import GPU_TYPES
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.paths import PROJECT_ROOT

CONFIG = yaml.safe_load((PROJECT_ROOT / "ray_cluster.yaml").read_text())
VENV_BIN = "~/kvsweep-venv/bin/"
COMMAND_LISTS = (
    "initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
    "head_start_ray_commands", "worker_start_ray_commands",
)  # fmt: skip
# Programs that must come from the project's virtualenv: Ubuntu 24.04's system pip refuses installs (PEP 668),
# and a Ray job's entrypoint runs with the environment Ray was started in.
VENV_PROGRAMS = {"ray", "pip", "pip3", "python", "python3", "hf", "huggingface-cli"}
DLAMI = "resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"


def test_it_passes_rays_own_schema_after_ray_fills_in_the_provider_defaults():
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(copy.deepcopy(CONFIG)))


def test_a_typo_fails_the_same_check():
    import jsonschema
    from ray.autoscaler._private.util import prepare_config, validate_config

    broken = copy.deepcopy(CONFIG)
    broken["available_node_types"]["h100"]["resourcez"] = broken["available_node_types"]["h100"].pop("resources")
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(broken))


def test_every_worker_type_is_one_known_gpu_type_with_its_accelerator_resource():
    workers = {name: node for name, node in CONFIG["available_node_types"].items() if name != CONFIG["head_node_type"]}
    declared = set()
    for node in workers.values():
        (accelerator,) = [key for key in node["resources"] if key.startswith("accelerator_type:")]
        declared.add(accelerator.removeprefix("accelerator_type:"))
        assert node["resources"]["GPU"] >= 1
    assert declared == {"H200", "H100", "A100", "L40S"} and declared <= set(GPU_TYPES)
    assert CONFIG["available_node_types"][CONFIG["head_node_type"]]["resources"]["GPU"] == 0


def test_every_node_starts_ray_with_a_small_object_store_no_memory_monitor_and_unniced_workers():
    for commands in (CONFIG["head_start_ray_commands"], CONFIG["worker_start_ray_commands"]):
        start = next(command for command in commands if "ray start" in command)
        assert "RAY_memory_monitor_refresh_ms=0 RAY_worker_niceness=0" in start
        assert "--object-store-memory=4000000000" in start


def _prepared():
    """The config as the launcher runs it: Ray's AWS defaults fill every command list this file leaves out."""
    from ray.autoscaler._private.util import prepare_config

    return prepare_config(copy.deepcopy(CONFIG))


def _programs(command: str) -> list[str]:
    """The program of each simple command in a shell command line (leading VAR=value words skipped)."""
    programs = []
    for part in re.split(r"&&|\|\||[;|(){}]|\$\(", command):
        words = [word for word in part.split() if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", word)]
        if words and words[0] not in {"!", "[", "]", "exit"}:
            programs.append(words[0])
    return programs


def test_program_splitting_finds_each_command_of_a_line():
    line = "test -x ~/v/bin/pip || X=1 python3 -m venv v && { sudo apt-get -q install y; pip install z; }"
    assert _programs(line) == ["test", "python3", "sudo", "pip"]


def test_every_command_of_every_node_runs_pip_python_ray_and_hf_from_the_projects_virtualenv():
    prepared = _prepared()
    for key in COMMAND_LISTS:
        for command in prepared[key]:
            for program in _programs(command):
                name = program.rsplit("/", 1)[-1]
                if name in VENV_PROGRAMS:
                    assert program == VENV_BIN + name, f"{key}: {command!r} runs {program}, not the virtualenv's"
                elif re.fullmatch(r"python3\.\d+", name):
                    assert f"{program} -m venv" in command, f"{key}: {command!r} runs the system {program}"


def test_a_command_list_left_to_rays_defaults_would_run_the_system_pip():
    """The check above can fail: Ray's AWS defaults install boto3 with the system pip on the head."""
    from ray.autoscaler._private.util import prepare_config

    config = copy.deepcopy(CONFIG)
    del config["head_setup_commands"]
    defaulted = prepare_config(config)["head_setup_commands"]
    assert any(program == "pip" for command in defaulted for program in _programs(command))


def test_the_virtualenv_is_made_from_a_python_the_project_accepts_before_anything_uses_it():
    requires = SpecifierSet(tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["requires-python"])
    prepared = _prepared()
    for key in ("head_setup_commands", "worker_setup_commands"):
        commands = prepared[key]
        (made_at,) = [index for index, command in enumerate(commands) if "-m venv" in command]
        (python,) = set(re.findall(r"python(3\.\d+) -m venv", commands[made_at]))
        assert requires.contains(f"{python}.0"), f"{key}: the virtualenv's Python {python} is outside {requires}"
        assert not any(VENV_BIN in command for command in commands[:made_at]), key
    installs = [c for c in prepared["worker_setup_commands"] if "pip install" in c and "kvsweep[gpu]" in c]
    assert installs and all(VENV_BIN + "pip install" in c and "-e '/home/ubuntu/kvsweep[gpu]'" in c for c in installs)
    head = prepared["head_setup_commands"]
    assert any(VENV_BIN + "pip install" in command and "boto3" in command for command in head)


def test_every_command_is_valid_bash():
    for key in COMMAND_LISTS:
        for command in _prepared()[key]:
            result = subprocess.run(["bash", "-n", "-c", command], capture_output=True, text=True)
            assert result.returncode == 0, f"{key}: {command!r}: {result.stderr}"


def test_every_node_type_boots_an_ubuntu_24_04_image_named_by_a_public_ssm_parameter():
    for name, node in CONFIG["available_node_types"].items():
        image = node["node_config"].get("ImageId", "")
        assert image.startswith("resolve:ssm:/aws/service/") and "24.04" in image, f"{name}: ImageId {image!r}"
        if node["resources"].get("GPU", 0) > 0:
            assert image == DLAMI, f"{name}: a GPU node needs the image with the NVIDIA driver, not {image!r}"


def test_gpu_nodes_fetch_the_model_the_sweeps_serve_into_the_default_cache_with_the_token_mounted():
    text = (PROJECT_ROOT / "ray_cluster.yaml").read_text()
    assert "huggingface-cli" not in text
    (download,) = [c for c in _prepared()["worker_setup_commands"] if " download " in c]
    assert download.startswith(f"{VENV_BIN}hf download {LLAMA_8B} ")
    # Replicas run with HF_HUB_OFFLINE=1 and find the model by name only in the default cache.
    assert "--local-dir" not in download and "--cache-dir" not in download and "HF_HOME" not in text
    assert "$HF_TOKEN" not in download and "--token" not in download
    assert CONFIG["file_mounts"]["/home/ubuntu/.cache/huggingface/token"] == "~/.cache/huggingface/token"


def test_the_checkout_is_synced_without_the_local_virtualenv_and_results():
    assert ".gitignore" in CONFIG["rsync_filter"]
    ignored = (PROJECT_ROOT / ".gitignore").read_text().split()
    assert ".venv/" in ignored and "results/" in ignored


def _driver_check() -> str:
    (check,) = [command for command in CONFIG["worker_setup_commands"] if "nvidia-smi" in command]
    return check


def _run_with_nvidia_smi(tmp_path, output: str | None) -> subprocess.CompletedProcess:
    """Run the GPU nodes' driver check where `nvidia-smi` prints ``output`` (None: there is no nvidia-smi)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "head").symlink_to(shutil.which("head"))
    if output is not None:
        fake = bin_dir / "nvidia-smi"
        fake.write_text(f"#!/bin/sh\nprintf '%s\\n' {output}\n")
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    # Only these two on the PATH: a real nvidia-smi of this machine cannot answer instead.
    env = {**os.environ, "PATH": str(bin_dir)}
    return subprocess.run([shutil.which("bash"), "-c", _driver_check()], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("driver", ["580.65.06", "595.91.07 595.91.07"])
def test_the_gpu_node_driver_check_passes_a_cuda_13_driver(tmp_path, driver):
    result = _run_with_nvidia_smi(tmp_path, driver)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("driver", ["575.57.08", "535.247.01", None])
def test_the_gpu_node_driver_check_stops_setup_below_580(tmp_path, driver):
    result = _run_with_nvidia_smi(tmp_path, driver)
    assert result.returncode != 0 and ">= 580" in result.stderr


@pytest.mark.parametrize("key", ["head_start_ray_commands", "worker_start_ray_commands"])
def test_ray_starts_with_the_virtualenv_first_on_the_path_so_jobs_run_its_python(tmp_path, key):
    """A job's entrypoint (`python sweeps/...`) runs with Ray's environment: bin/ray alone leaves `python` the
    system's. Here the start command runs with a stand-in `ray` in the virtualenv that reports what `python` is."""
    bin_dir = tmp_path / "kvsweep-venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in (("ray", 'command -v python\necho "$RAY_AUTH_MODE"\necho "$@"'), ("python", "exit 0")):
        program = bin_dir / name
        program.write_text(f"#!/bin/sh\n{body}\n")
        program.chmod(program.stat().st_mode | stat.S_IEXEC)
    (start,) = [command for command in CONFIG[key] if "ray start" in command]
    env = {key: value for key, value in os.environ.items() if key != "RAY_AUTH_MODE"}
    env |= {"HOME": str(tmp_path), "RAY_HEAD_IP": "10.0.0.1"}
    result = subprocess.run([shutil.which("bash"), "-c", start], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    found, auth_mode, arguments = result.stdout.splitlines()
    assert found == str(bin_dir / "python") and arguments.startswith("start ")
    # Token authentication on every node; the dashboard and job API on the head's loopback (`ray dashboard`).
    assert auth_mode == "token"
    assert re.findall(r"--dashboard-host=(\S+)", arguments) in ([], ["127.0.0.1"])


def test_every_node_gets_the_token_file_from_the_launching_machine_readable_by_its_user_only():
    assert CONFIG["file_mounts"]["/home/ubuntu/.ray/auth_token"] == "~/.ray/auth_token"
    for key in ("head_setup_commands", "worker_setup_commands"):
        assert "chmod 700 ~/.ray && chmod 600 ~/.ray/auth_token" in CONFIG[key], key
    text = (PROJECT_ROOT / "ray_cluster.yaml").read_text()
    assert "RAY_AUTH_TOKEN=" not in text and "RAY_AUTH_MODE=disabled" not in text
