"""LMCache's CPU tier behind vLLM's ``LMCacheConnectorV1``.

LMCache builds its own engine in every rank's worker, each with a CPU tier of its own, so each rank's connector is
given its share of the replica's budget. Its loads run layer by layer beside the forward pass, so only a load longer
than the compute stalls a step; every step that saved waits for its saves (``wait_for_save``: the copies, a sync and
per-chunk bookkeeping, calibrated on an H200). Its tier survives vLLM's prefix-cache reset, and vLLM exports no store
counter for it: its stores are read from LMCache's own log lines.

In the simulator a step pays two things for it, each from the engine stack's constants
(``roofline.hardware.Calibration``): the source study's save stall (``save_stall_s``: the copies still running after the
forward pass, and ``lmcache_save_*`` for the sync and bookkeeping), and the work a stack fitted on its own GPU cells
times from LMCache's log (``step_work_s``; LMCache 0.5.3 on vLLM 0.26, neither layer-wise nor asynchronous loading):

- it retrieves a request's prefix from its CPU tier before the forward pass (not beside it) and stores the request's
  new full chunks after it; each costs what LMCache's own log times it at, per retrieve or store and per chunk;
- a step that computes prompt tokens pays a fixed cost besides: its traces show that such a step ends the
  asynchronous scheduling pipeline (they fit a roofline read with one step in flight, 0.95-0.97 correlation, against
  0.19-0.67 read with two), so the host's work of a step is no longer hidden behind the GPU's.

A stack sets one or the other: the first stack's ``lmcache_save_*`` time its whole save, the second's are 0.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.mechanisms.tier import Connector, Evidence, NodeNeed, Stores, Tier, served
from orchestrator.records.cell import CellOutcome

if TYPE_CHECKING:
    from orchestrator.roofline.hardware import Calibration

CHUNK_TOKENS = 256  # LMCACHE_CHUNK_SIZE: the unit it saves, hashes and counts
_STORED = re.compile(r"LMCache INFO:.*?Stored (\d+) out of total \d+ tokens")


def lmcache_stores(server_log: str) -> list[int]:
    """The tokens of each store LMCache logged."""
    return [int(tokens) for tokens in _STORED.findall(server_log)]


@dataclass(frozen=True)
class LMCacheCpuTier(Tier):
    name = "lmcache"
    needs = frozenset({NodeNeed.CUDA, NodeNeed.LMCACHE})
    keeps_kv_across_reset = True

    def connector_gib(self, dram_gb: float, tp: int) -> float:
        return self.fixed_gib if self.fixed_gib is not None else dram_gb / tp

    def connector(self, connector_gib: float) -> Connector:
        config = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
        env = {"LMCACHE_LOCAL_CPU": "True", "LMCACHE_MAX_LOCAL_CPU_SIZE": f"{connector_gib:g}",
               "LMCACHE_CHUNK_SIZE": str(CHUNK_TOKENS)}  # fmt: skip
        return ("--kv-transfer-config", json.dumps(config)), env

    def save_stall_s(self, calibration: Calibration, saves: Sequence[int], copied_at: float,
                     forward_end: float) -> float:  # fmt: skip
        num_chunks = sum(math.ceil(saved / CHUNK_TOKENS) for saved in saves)
        sync = calibration.lmcache_save_step_s + calibration.lmcache_save_chunk_s * num_chunks
        return max(copied_at, forward_end) - forward_end + sync

    def step_work_s(self, calibration: Calibration, computes_prompt: bool, saves: Sequence[int],
                    loads: Sequence[int]) -> float:  # fmt: skip
        stores = sum(calibration.lmcache_store_s + calibration.lmcache_store_chunk_s * math.ceil(tokens / CHUNK_TOKENS)
                     for tokens in saves if tokens)  # fmt: skip
        retrieves = sum(calibration.lmcache_retrieve_s + calibration.lmcache_retrieve_chunk_s
                        * math.ceil(tokens / CHUNK_TOKENS) for tokens in loads if tokens)  # fmt: skip
        return (calibration.lmcache_prompt_step_s if computes_prompt else 0.0) + stores + retrieves

    def stores(self, outcome: CellOutcome, kv_bytes_per_token: float) -> Stores:
        # vLLM's offload counters stay 0 beside LMCache's connector (the first H200 cell): its log comes first.
        logged = self.logged_stores(outcome)
        return logged if logged.tokens else super().stores(outcome, kv_bytes_per_token)

    def logged_stores(self, outcome: CellOutcome) -> Stores:
        logged = lmcache_stores(outcome.server_log)
        return Stores(float(sum(logged)), "LMCache's log", len(logged))

    def evidence(self, outcome: CellOutcome) -> Evidence:
        logged = self.logged_stores(outcome)
        return Evidence(logged.tokens > 0, f"LMCache stored {logged.tokens:,.0f} tokens in {logged.count} stores "
                        f"(its log); its tier {served(outcome.config.tier_counters)}")  # fmt: skip
