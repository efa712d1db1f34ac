"""What a simulated cell records of its engine (pure): the scheduler's configuration, with the policy's mechanisms as
the record names them, and the cost model's calibration. The simulator (``orchestrator.sim``) runs from it; a cell's
``cell.json`` reads it back (``cell.cell_json``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from orchestrator.mechanisms.continuum.config import ContinuumConfig
from orchestrator.roofline.hardware import Calibration


@dataclass(frozen=True)
class SchedulerConfig:
    num_blocks: int
    num_shared_blocks: int  # the system prompt's full blocks, which every job shares: held all run
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int = 16
    # The policy's mechanisms as the record names them (the scheduler is handed the mechanisms themselves): its
    # ordering (vLLM priority scheduling by job arrival index), its pin rules and its tier's simulated model.
    job_priority: bool = False
    pins: ContinuumConfig | None = None
    tier: str | None = None
    tier_tokens: int = 0
    # vLLM 0.32's ``scheduler_reserve_full_isl`` (on by default): a waiting request is admitted only when its
    # whole prompt fits in the free blocks, though it is given blocks one chunk at a time. Without it a long
    # prompt admitted on its first chunk runs the pool dry mid-prefill and preemptions follow.
    reserve_full_prompt: bool = True


@dataclass(frozen=True)
class SimEngineConfig:
    """What a simulated cell records of its engine: the scheduler's configuration and the cost model's
    calibration (the device and the model are the cell's own)."""

    scheduler: SchedulerConfig
    calibration: Calibration
    kind: Literal["sim"] = "sim"
