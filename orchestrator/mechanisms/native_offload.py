"""vLLM's own CPU offload: the ``OffloadingConnector`` (native) and the ``SimpleCPUOffloadConnector`` (simple).

Both copy to a host-memory tier of the replica's DRAM budget, which vLLM splits over the ranks, and load beside the
forward passes: the connector tells the scheduler the load is asynchronous, so its request waits, not the step. The
simulator models both so, the simple one's stores at a cost of their own (below). The native connector exports ``kv_offload_*`` counters; vLLM 0.26's simple one records
its stores only in debug lines, which its policy lets through.

Each load is a job on the connector's transfer queue that takes a fixed time besides its bytes at the host link's
rate (the engine stack's ``native_load_job_s``; 0 in the source study's, which measured no native offload), so loads
wait behind each other. vLLM 0.26's cells tell the queue from a fixed wait after each load (the connector noticing a
finished load a few steps late): the wait that fits the cells at 1.8 JPS leaves the one at 3 JPS 11% fast, and the
wait fitted on all of them puts those at 1.8 JPS 4% slow; the queue fits both within 4%. Where the fixed time goes is
not measured: a 16-token block of Llama-3.1-8B is 64 tensors of 32 KiB, one per layer and K or V, and copies launched
per block would weigh more than their bytes.

vLLM's simple offload connector (``SimpleOffload``) loads as the native one does, and its cells run 4-6% slower than
fcfs at 1 JPS, with no pressure for its tier to relieve, where the native connector's do not: its stores cost the step.
The stack's ``simple_store_s`` is what each request's store makes its step wait, fitted on those cells' mean job times;
what in the store takes that time is not measured.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.mechanisms.tier import Connector, Evidence, Stores, Tier, served
from orchestrator.records.cell import CellOutcome

if TYPE_CHECKING:
    from orchestrator.roofline.hardware import Calibration, StepCost

_SIMPLE_STORED = re.compile(r"Store event \d+ completed: cached (\d+) blocks to CPU")


def simple_offload_stores(server_log: str) -> list[int]:
    """The blocks of each store the simple offload connector's debug lines record."""
    return [int(count) for count in _SIMPLE_STORED.findall(server_log)]


@dataclass(frozen=True)
class NativeOffload(Tier):
    name = "native"
    loads_beside_forward = True

    def connector(self, connector_gib: float) -> Connector:
        return ("--kv-offloading-size", f"{connector_gib:g}", "--kv-offloading-backend", "native"), {}

    def load_s(self, cost: StepCost, num_tokens: int, num_slow_tokens: int) -> float:
        return cost.calibration.native_load_job_s + super().load_s(cost, num_tokens, num_slow_tokens)


@dataclass(frozen=True)
class SimpleOffload(NativeOffload):
    name = "simple"
    connector_debug_log = True

    def connector(self, connector_gib: float) -> Connector:
        args, env = super().connector(connector_gib)
        return args, env | {"VLLM_USE_SIMPLE_KV_OFFLOAD": "1"}

    def step_work_s(self, calibration: Calibration, computes_prompt: bool, saves: Sequence[int],
                    loads: Sequence[int]) -> float:  # fmt: skip
        return calibration.simple_store_s * sum(1 for tokens in saves if tokens)

    def logged_stores(self, outcome: CellOutcome) -> Stores:
        blocks = simple_offload_stores(outcome.server_log)
        facts = outcome.config.engine_facts
        block_size = facts.block_size if facts and facts.block_size else 0
        return Stores(float(sum(blocks) * block_size), "its debug log", len(blocks))

    def evidence(self, outcome: CellOutcome) -> Evidence:
        if outcome.config.tier_counters.kv_offload_store_bytes is not None:
            return super().evidence(outcome)
        blocks = sum(simple_offload_stores(outcome.server_log))
        facts = outcome.config.engine_facts
        tokens = f" ({blocks * facts.block_size:,} tokens)" if facts and facts.block_size else ""
        return Evidence(blocks > 0, f"CPU tier stored {blocks:,} blocks{tokens} (its debug log); "
                        f"it {served(outcome.config.tier_counters)}")  # fmt: skip
