"""What the Ray cluster has, and where each cell can run: read once, before anything is scheduled.

A Ray request for an accelerator type the cluster lacks waits forever, so the driver never makes one:
cells of absent types are reported pending. Each node gets as many worker slots of its type as it has
GPUs, but no more than its memory can give every slot the sweep's largest DRAM budget for that type.
The CPU engine gets one slot on the driver's node: vLLM's CPU worker binds cores, two would fight.
Simulated cells need no GPU: they get one slot per CPU of the driver's node (placement ``sim``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.gpus import CPU
from orchestrator.validation import InputError

GIB = 2**30
GB = 1e9
ACCELERATOR_PREFIX = "accelerator_type:"
SIM = "sim"  # the placement of simulated cells: any CPU, no GPU


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    address: str
    accelerator_type: str | None
    num_gpus: int
    memory_gb: float  # Ray's schedulable memory on the node
    num_cpus: int = 1


@dataclass(frozen=True)
class Slot:
    """One place a cell worker runs: a GPU of ``gpu`` type on ``node_id`` (or the CPU engine's place, or
    a CPU for simulated cells)."""

    gpu: str
    node_id: str
    index: int
    memory_gb: float  # reserved for the slot's CPU KV tier

    @property
    def name(self) -> str:
        return f"{self.gpu}#{self.index}@{self.node_id[:8]}"

    def actor_options(self) -> dict:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options: dict = {"scheduling_strategy": NodeAffinitySchedulingStrategy(self.node_id, soft=False)}
        if self.gpu in (CPU, SIM):
            options["num_cpus"] = 1
        else:
            options.update(num_cpus=0, num_gpus=1, accelerator_type=self.gpu)
        if self.memory_gb > 0:
            options["memory"] = int(self.memory_gb * GB)
        return options


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[NodeInfo, ...]
    driver_node_id: str

    def gpu_types(self) -> set[str]:
        return {node.accelerator_type for node in self.nodes if node.accelerator_type and node.num_gpus > 0}

    def has(self, gpu: str) -> bool:
        return gpu in (CPU, SIM) or gpu in self.gpu_types()

    def nodes_of(self, gpu: str) -> list[NodeInfo]:
        if gpu == CPU:
            return [node for node in self.nodes if node.node_id == self.driver_node_id]
        return [node for node in self.nodes if node.accelerator_type == gpu and node.num_gpus > 0]

    def check_dram(self, gpu: str, dram_gb: float) -> None:
        """Raises ``InputError`` if no node of ``gpu`` type has ``dram_gb`` of memory to give a replica."""
        nodes = self.nodes_of(gpu)
        if not nodes or dram_gb <= 0:
            return
        largest = max(node.memory_gb for node in nodes)
        if dram_gb > largest:
            raise InputError(
                f"DRAM budget {dram_gb:g} GB is larger than any {gpu} node can give (largest: {largest:.0f} GB of "
                f"Ray memory); valid: at most {math.floor(largest)}"
            )

    def slots(self, gpu: str, dram_gb: float) -> list[Slot]:
        """Worker slots for cells of ``gpu`` whose largest DRAM budget is ``dram_gb``."""
        if gpu == CPU:
            return [Slot(CPU, self.driver_node_id, 0, dram_gb)]
        if gpu == SIM:  # a simulated DRAM budget reserves nothing
            driver = next(node for node in self.nodes if node.node_id == self.driver_node_id)
            return [Slot(SIM, self.driver_node_id, index, 0) for index in range(max(1, driver.num_cpus))]
        slots = []
        for node in self.nodes_of(gpu):
            fit = node.num_gpus if dram_gb <= 0 else min(node.num_gpus, int(node.memory_gb // dram_gb))
            slots += [Slot(gpu, node.node_id, len(slots) + i, dram_gb) for i in range(fit)]
        return slots


def inventory_from_nodes(nodes: Iterable[dict], driver_node_id: str) -> Inventory:
    """An inventory from ``ray.nodes()`` entries (alive nodes only)."""
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
                memory_gb=resources.get("memory", 0) / GB,
                num_cpus=int(resources.get("CPU", 1)),
            )
        )
    return Inventory(tuple(infos), driver_node_id)


def read_inventory() -> Inventory:
    import ray

    return inventory_from_nodes(ray.nodes(), ray.get_runtime_context().get_node_id())
