"""What the Ray cluster has and can get, and where each cell can run.

The cluster a sweep sees is the nodes that are up plus the node types the autoscaler can launch
(``sweep.autoscaler`` reads them). A Ray request for an accelerator type the cluster neither has nor can
launch waits forever, so the driver never makes one: cells of absent types are reported pending. Each
node gets as many worker slots of its type as it has GPUs, but no more than its memory can give each
slot its replica's host memory (the largest DRAM budget of the type plus the replica itself).
The CPU engine gets one slot on the driver's node: vLLM's CPU worker binds cores, two would fight.
Simulated cells need no GPU: they get one slot per CPU of the driver's node (placement ``sim``).
"""

from __future__ import annotations

import math
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.cell.spec import SIM
from orchestrator.gpus import CPU
from orchestrator.inputs.validation import InputError
from orchestrator.units import GIB

ACCELERATOR_PREFIX = "accelerator_type:"


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    address: str
    accelerator_type: str | None
    num_gpus: int
    memory_gib: float  # Ray's schedulable memory on the node
    num_cpus: int = 1
    raylet_port: int = 0  # where its raylet listens (0: unknown)

    @property
    def label(self) -> str:
        return f"node {self.node_id[:8]} ({self.address})"


@dataclass(frozen=True)
class NodeType:
    """A worker node type the autoscaler can launch (from its configuration)."""

    name: str
    accelerator_type: str
    num_gpus: int  # per node
    max_workers: int  # nodes of this type the autoscaler may run at once
    memory_gib: float | None = None  # None: the configuration does not say (the provider fills it in)

    def slots_per_node(self, replica_gib: float) -> int:
        if self.memory_gib is None or replica_gib <= 0:
            return self.num_gpus
        return min(self.num_gpus, int(self.memory_gib // replica_gib))


@dataclass(frozen=True)
class Slot:
    """One place a cell worker runs: a GPU of ``gpu`` type on ``node_id`` (or the CPU engine's place, or
    a CPU for simulated cells). A gang's slot stands for the ``gang_size`` slots whose workers stepped aside for one
    cell: a routed cell's coordinator holds nothing itself (Ray Serve places the replicas on those GPUs), a
    tensor-parallel replica's worker holds all of them (``num_gpus``), on one node."""

    gpu: str
    node_id: str
    index: int
    memory_gib: float  # reserved host memory: the replica's CPU KV tier and the replica itself
    gang_size: int = 0
    num_gpus: int = 1  # GPUs its actor holds (on a GPU type): 0 for a routed cell's coordinator

    @property
    def name(self) -> str:
        gang = f"x{self.gang_size}" if self.gang_size else ""
        return f"{self.gpu}#{self.index}{gang}@{self.node_id[:8]}"

    def actor_options(self) -> dict:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options: dict = {"scheduling_strategy": NodeAffinitySchedulingStrategy(self.node_id, soft=False)}
        if self.gpu in (CPU, SIM):
            options["num_cpus"] = 1
        elif not self.num_gpus:
            options["num_cpus"] = 0
        else:
            options.update(num_cpus=0, num_gpus=self.num_gpus, accelerator_type=self.gpu)
        if self.memory_gib > 0:
            options["memory"] = int(self.memory_gib * GIB)
        return options


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[NodeInfo, ...]
    driver_node_id: str
    launchable: tuple[NodeType, ...] = ()

    def gpu_types(self) -> set[str]:
        return {node.accelerator_type for node in self.nodes if node.accelerator_type and node.num_gpus > 0}

    def is_up(self, gpu: str) -> bool:
        return gpu in (CPU, SIM) or gpu in self.gpu_types()

    def node_types_of(self, gpu: str) -> list[NodeType]:
        return [node_type for node_type in self.launchable if node_type.accelerator_type == gpu]

    def has(self, gpu: str) -> bool:
        """The cluster has ``gpu`` now or its autoscaler can launch it: its cells can be scheduled."""
        return self.is_up(gpu) or bool(self.node_types_of(gpu))

    def availability(self, gpu: str) -> str:
        """One phrase for ``--dry-run``: up (N GPUs), launchable (max N), or absent."""
        up = sum(node.num_gpus for node in self.nodes_of(gpu)) if gpu not in (CPU, SIM) else 0
        launchable = sum(t.max_workers * t.num_gpus for t in self.node_types_of(gpu))
        parts = [f"up ({up} GPUs on {len(self.nodes_of(gpu))} node(s))"] if up else []
        parts += [f"launchable (max {launchable} GPUs)"] if launchable else []
        return ", ".join(parts) or "absent"

    def nodes_of(self, gpu: str) -> list[NodeInfo]:
        if gpu == CPU:
            return [node for node in self.nodes if node.node_id == self.driver_node_id]
        return [node for node in self.nodes if node.accelerator_type == gpu and node.num_gpus > 0]

    def check_replica_memory(self, gpu: str, dram_gib: float, replica_gib: float) -> None:
        """Raises ``InputError`` if no node of ``gpu`` type, up or launchable, can hold one replica of
        ``replica_gib`` host memory (its DRAM budget ``dram_gib`` plus the replica itself). A launchable
        type whose memory the configuration does not state is checked when its nodes come up."""
        sizes = [(node.memory_gib, "up") for node in self.nodes_of(gpu)]
        sizes += [(t.memory_gib, f"launchable type {t.name!r}") for t in self.node_types_of(gpu) if t.memory_gib]
        if not sizes or replica_gib <= 0 or any(size >= replica_gib for size, _ in sizes):
            return
        largest, where = max(sizes)
        overhead = replica_gib - dram_gib
        itself = f" a replica needs the budget plus {overhead:g} GiB for itself, and" if overhead > 0 else ""
        raise InputError(
            f"DRAM budget {dram_gib:g} GiB is larger than any {gpu} node can give:{itself} the largest {gpu} node "
            f"({where}) has {largest:.0f} GiB of Ray memory; valid: at most {max(0, math.floor(largest - overhead))}"
        )

    def check_gang(self, gpu: str, groups: tuple[int, ...], slot_gib: float) -> None:
        """Raises ``InputError`` if the cluster can never give a cell its ``groups`` of GPUs of ``gpu`` at once, each
        group on one node (a tensor-parallel replica's GPUs): the slots of the nodes up and of the most nodes the
        autoscaler may launch, for slots of ``slot_gib`` host memory."""
        tp, gang_size = max(groups), sum(groups)
        largest = self.largest_node_slots(gpu, slot_gib)
        if tp > largest:
            raise InputError(
                f"a tensor-parallel replica of {tp} {gpu} GPUs needs them on one node, and no {gpu} node up or "
                f"launchable gives more than {largest} slot(s); valid: --tp up to {largest}"
            )
        up = len(self.slots(gpu, slot_gib))
        launchable = self.max_slots_launchable(gpu, slot_gib)
        if gang_size > up + launchable:
            replicas = f"{len(groups)} replicas" + (f" of {tp} GPUs" if tp > 1 else "")
            raise InputError(
                f"a cell of {replicas} needs {gang_size} {gpu} GPUs at once; the cluster has "
                f"{up} {gpu} slot(s) up and can launch {launchable} more; valid: --replicas up to "
                f"{(up + launchable) // tp}"
            )

    def largest_node_slots(self, gpu: str, slot_gib: float) -> int:
        """The most slots one node of ``gpu`` gives, up or launchable: the largest tensor-parallel replica it holds."""
        up = [self._node_slots(node, slot_gib) for node in self.nodes_of(gpu)]
        launchable = [node_type.slots_per_node(slot_gib) for node_type in self.node_types_of(gpu)]
        return max(up + launchable, default=0)

    @staticmethod
    def _node_slots(node: NodeInfo, slot_gib: float) -> int:
        return node.num_gpus if slot_gib <= 0 else min(node.num_gpus, int(node.memory_gib // slot_gib))

    def slots(self, gpu: str, replica_gib: float) -> list[Slot]:
        """Worker slots on the nodes that are up, for cells of ``gpu`` whose replicas need ``replica_gib``."""
        if gpu == CPU:
            return [Slot(CPU, self.driver_node_id, 0, replica_gib)]
        if gpu == SIM:  # a simulated DRAM budget reserves nothing
            driver = next(node for node in self.nodes if node.node_id == self.driver_node_id)
            return [Slot(SIM, self.driver_node_id, index, 0) for index in range(max(1, driver.num_cpus))]
        slots = []
        for node in self.nodes_of(gpu):
            slots += [Slot(gpu, node.node_id, len(slots) + i, replica_gib) for i in range(self._node_slots(node, replica_gib))]
        return slots

    def max_slots_launchable(self, gpu: str, replica_gib: float) -> int:
        return sum(t.max_workers * t.slots_per_node(replica_gib) for t in self.node_types_of(gpu))


def inventory_from_nodes(nodes: Iterable[dict], driver_node_id: str, launchable: tuple[NodeType, ...] = ()) -> Inventory:
    """An inventory from ``ray.nodes()`` entries (alive nodes only) and the launchable node types."""
    infos = []
    for node in nodes:
        if not node.get("Alive"):
            continue
        resources = node.get("Resources", {})
        types = sorted(key.removeprefix(ACCELERATOR_PREFIX) for key in resources if key.startswith(ACCELERATOR_PREFIX))
        infos.append(
            NodeInfo(
                node_id=node["NodeID"],
                address=node.get("NodeManagerAddress", ""),
                accelerator_type=types[0] if types else None,
                num_gpus=int(resources.get("GPU", 0)),
                memory_gib=resources.get("memory", 0) / GIB,
                num_cpus=int(resources.get("CPU", 1)),
                raylet_port=int(node.get("NodeManagerPort", 0)),
            )
        )
    return Inventory(tuple(infos), driver_node_id, launchable)


def read_inventory(launchable: tuple[NodeType, ...] = ()) -> Inventory:
    import ray

    return inventory_from_nodes(ray.nodes(), ray.get_runtime_context().get_node_id(), launchable)


def raylet_answers(node: NodeInfo, timeout_s: float = 2.0) -> bool:
    """Whether the node's raylet still accepts a connection: asked the moment a worker stops answering, since
    Ray's own health check marks a dead node only after several missed beats (about 10 s here, 30 s by default)."""
    if not node.raylet_port:
        return True
    try:
        with socket.create_connection((node.address, node.raylet_port), timeout=timeout_s):
            return True
    except OSError:
        return False
