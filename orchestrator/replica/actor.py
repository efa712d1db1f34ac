"""The replica as a Ray actor placed on a node with the cell's accelerator type and DRAM budget.

``memory=`` only places the actor (Ray does not enforce it); the DRAM budget itself is enforced by the
engine's own CPU-tier setting. The CPU engine asks for CPU only.
"""

from __future__ import annotations

from orchestrator.replica.replica import Replica

GIB = 2**30


def replica_actor_options(device: str, accelerator_type: str | None, dram_gb: float) -> dict:
    """``.options()`` for a replica actor: one GPU of ``accelerator_type`` on GPU engines."""
    if device == "gpu":
        options = {"num_gpus": 1, "num_cpus": 1, "accelerator_type": accelerator_type}
        if dram_gb > 0:
            options["memory"] = int(dram_gb * GIB)
        return options
    return {"num_cpus": 1}


def replica_actor_class():
    """The Ray actor class (created on first use so importing this module does not import Ray)."""
    import ray

    # max_restarts=0: a crashed replica is reported, and the sweep decides whether to retry the cell.
    return ray.remote(max_restarts=0)(Replica)
