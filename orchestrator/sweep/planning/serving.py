"""From a cell to what serves it: the replica's engine configuration and what its requests carry (pure).

The worker's first step for a real cell, decided before anything starts. It is apart from ``planning.cells``
because the data flows cells -> replica: cell expansion needs nothing of the replica, and this needs the cell,
the policy and the replica's configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.cell.spec import CellSpec, EngineKind
from orchestrator.models.served import ServedModel
from orchestrator.policies.catalog import get_policy
from orchestrator.replica.config import EngineConfig, FakeEngineConfig, VllmEngineConfig


@dataclass(frozen=True)
class ServedCell:
    """What a worker needs to serve a cell: the replica's configuration and what requests must carry."""

    engine: EngineConfig
    served_model_name: str
    send_priority: bool
    answer_token_ids: tuple[int, ...] | None = None  # what answers are restricted to (dummy weights)


def served_cell(cell: CellSpec, model: ServedModel) -> ServedCell:
    """The replica configuration of ``cell`` with ``model`` as the worker's node serves it."""
    policy = get_policy(cell.policy)
    served_name = cell.model.rstrip("/").split("/")[-1]
    if cell.engine is EngineKind.FAKE:
        engine = FakeEngineConfig(served_model_name=served_name, prefix_cache=True)
        return ServedCell(engine, served_name, policy.ordering.sends_priority, model.answer_token_ids)
    setup = cell.engine_setup
    base = VllmEngineConfig(
        model=model.directory,
        load_format=model.load_format,
        served_model_name=served_name,
        device=setup.device,
        block_size=setup.block_size,
        num_kv_blocks=setup.num_kv_blocks,
        gpu_memory_utilization=setup.gpu_memory_utilization,
        max_model_len=setup.max_model_len,
        max_num_seqs=setup.max_num_seqs,
        max_num_batched_tokens=setup.max_num_batched_tokens,
        enforce_eager=setup.enforce_eager,
        tensor_parallel_size=setup.tp,
    )
    engine = policy.engine_config(base, setup.dram_gb)
    return ServedCell(engine, served_name, policy.ordering.sends_priority, model.answer_token_ids)
