"""Scaling up for a sweep: how many GPUs of each launchable type to ask for, and when to stop waiting.

Pure bookkeeping on a monotonic clock; the call that reaches the autoscaler is injected (``ask``), so the
rules are testable without a cluster. The driver calls ``update`` every few seconds while cells of a
launchable type wait, and ``withdraw`` when the sweep ends.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from orchestrator.sweep.cluster.inventory import NodeType


def gpus_to_ask(node_type: NodeType, num_slots: int, replica_gib: float) -> int:
    """GPUs to ask of ``node_type`` for ``num_slots`` slots (a cell takes one, a routed cell on GPUs one per
    replica), within its ``max_workers``: whole nodes, since a node's memory may give fewer slots than it has GPUs."""
    per_node = max(1, node_type.slots_per_node(replica_gib))
    nodes = min(node_type.max_workers, math.ceil(num_slots / per_node))
    return nodes * node_type.num_gpus


@dataclass
class ScaleUp:
    timeout_s: float
    ask: Callable[[Mapping[str, int]], None]
    _asked: dict[str, int] = field(default_factory=dict)
    _waiting_since: dict[str, float] = field(default_factory=dict)  # types asked for with no node up yet

    def update(self, demand: Mapping[str, int], up: set[str], now: float) -> list[str]:
        """Ask for ``demand`` GPUs per type (a changed demand replaces the last ask); the types asked for
        that have had no node up for longer than ``timeout_s``."""
        wanted = {gpu: count for gpu, count in demand.items() if count > 0}
        if wanted != self._asked:
            self.ask(wanted)
            self._asked = wanted
        timed_out = []
        for gpu in wanted:
            if gpu in up:
                self._waiting_since.pop(gpu, None)
                continue
            since = self._waiting_since.setdefault(gpu, now)
            if now - since > self.timeout_s:
                timed_out.append(gpu)
        return timed_out

    def withdraw(self) -> None:
        """Drop the request, so that nodes the sweep no longer needs can be scaled down."""
        if self._asked:
            self.ask({})
            self._asked = {}
