"""How the report names what it compares (pure): a KV policy behind a router reads "continuum @ session-affinity",
a tensor-parallel GPU "H100 TP4".

Written here once and never parsed back: the summary keeps ``kv_policy``, ``router``, ``gpu_type`` and ``tp`` beside
the names, and a stage that needs a part looks it up by the name.
"""

from __future__ import annotations


def arm_name(policy: str, router: str | None) -> str:
    """A compared arm: the policy alone, or behind its router in a cell of several replicas."""
    return f"{policy} @ {router}" if router else policy


def shape_name(gpu: str, tp: int) -> str:
    """The GPU a comparison runs on: its type, with the tensor-parallel degree past one."""
    return f"{gpu} TP{tp}" if tp > 1 else gpu
