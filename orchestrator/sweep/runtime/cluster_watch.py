"""The cluster under a sweep's workers, as the pool (``runtime.pool``) follows it: read again every few seconds, the
nodes seen up and those lost (a node whose raylet does not answer), the autoscaler asked for as many GPUs as the
launchable types' waiting cells can use, and the placements to give up on, with the reason: nodes too small for a
replica, none up within ``--scale-up-timeout-s``, every node of a type lost and none joined in time."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from orchestrator.sweep.cluster.autoscaler import request_gpus
from orchestrator.sweep.cluster.inventory import Inventory, NodeInfo, raylet_answers, read_inventory
from orchestrator.sweep.planning.scaling import ScaleUp, gpus_to_ask

# How often the pool looks for nodes the autoscaler brought up and updates its request.
SCALE_REFRESH_S = 2.0


class ClusterWatch:
    """The cluster as last read (``inventory``), the nodes lost during the sweep (``lost_nodes``, by node id), and
    the autoscaler's request; ``timeout_s`` is how long a type may wait for a node."""

    def __init__(self, inventory: Inventory, timeout_s: float):
        self.inventory, self.timeout_s = inventory, timeout_s
        self.lost_nodes: dict[str, NodeInfo] = {}
        self._seen = {node.node_id: node for node in inventory.nodes}  # every node the sweep has seen up
        self._scale = ScaleUp(timeout_s, self._ask)
        self._without_nodes_since: dict[str, float] = {}  # types not launchable, with cells waiting and no worker
        self._last_refresh = 0.0

    def refresh(self) -> bool:
        """Read the cluster again where ``SCALE_REFRESH_S`` has passed since the last reading; whether it did."""
        now = time.monotonic()
        if now - self._last_refresh < SCALE_REFRESH_S:
            return False
        self._last_refresh = now
        self.inventory = read_inventory(self.inventory.launchable)
        self._seen |= {node.node_id: node for node in self.inventory.nodes}
        return True

    def lost(self, node_id: str) -> NodeInfo | None:
        """The node if it has left the cluster: its raylet does not answer (Ray itself lists a node dead only some
        seconds after it went)."""
        if node_id in self.lost_nodes:
            return self.lost_nodes[node_id]
        node = self._seen.get(node_id)
        return None if node is None or raylet_answers(node) else node

    def give_ups(self, waiting: Mapping[str, int], replica_gib: Mapping[str, float],
                 slots_of: Callable[[str], int]) -> dict[str, str]:  # fmt: skip
        """Ask the autoscaler for the GPUs the cells ``waiting`` (slots per placement) can use, each replica of
        ``replica_gib``; the placements to give up on, with the reason (``slots_of``: a placement's slots with
        workers)."""
        now = time.monotonic()
        demand, give_up = {}, self._without_nodes(waiting, slots_of, now)
        for gpu in [gpu for gpu in waiting if self.inventory.node_types_of(gpu)]:
            if waiting[gpu]:
                demand[gpu] = gpus_to_ask(self.inventory.node_types_of(gpu)[0], waiting[gpu], replica_gib[gpu])
            if waiting[gpu] and self.inventory.is_up(gpu) and not slots_of(gpu):
                largest = max(node.memory_gib for node in self.inventory.nodes_of(gpu))
                give_up[gpu] = (f"the {gpu} nodes that came up have {largest:.0f} GiB of Ray memory, a replica "
                                f"needs {replica_gib[gpu]:g} GiB")  # fmt: skip
        for gpu in self._scale.update(demand, self.inventory.gpu_types(), now):
            give_up[gpu] = (f"the autoscaler brought up no {gpu} node within {self.timeout_s:g} s "
                            "(--scale-up-timeout-s)")  # fmt: skip
        return give_up

    def withdraw(self) -> None:
        """Drop the request to the autoscaler, so that nodes the sweep no longer needs can go."""
        self._scale.withdraw()

    def _without_nodes(self, waiting: Mapping[str, int], slots_of: Callable[[str], int], now: float) -> dict[str, str]:
        """The types the autoscaler cannot launch whose every node was lost with cells still waiting, once none
        has joined for ``--scale-up-timeout-s`` (a KubeRay or Slurm cluster may bring a replacement back)."""
        give_up = {}
        for gpu, count in waiting.items():
            lost = [node.label for node in self.lost_nodes.values() if node.accelerator_type == gpu]
            if not count or not lost or self.inventory.node_types_of(gpu) or slots_of(gpu):
                self._without_nodes_since.pop(gpu, None)
                continue
            if now - self._without_nodes_since.setdefault(gpu, now) > self.timeout_s:
                give_up[gpu] = (f"every {gpu} node was lost ({', '.join(lost)}) and none joined within "
                                f"{self.timeout_s:g} s (--scale-up-timeout-s)")  # fmt: skip
        return give_up

    def _ask(self, demand: Mapping[str, int]) -> None:
        """Ask the autoscaler for ``demand`` GPUs per type as whole nodes of the type it launches."""
        request_gpus(demand, {gpu: self.inventory.node_types_of(gpu)[0].num_gpus for gpu in demand})
