"""From a cell to what serves it: the replica's engine configuration and what its requests carry (pure).

The worker's first step for a real cell, decided before anything starts. It is apart from ``planning.cells``
because the data flows cells -> replica: cell expansion needs nothing of the replica, and this needs the cell,
the policy and the replica's configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.models.served import ServedModel
from orchestrator.policies import get_policy
from orchestrator.replica.config import EngineConfig, FakeEngineConfig, VllmEngineConfig
from orchestrator.sweep.planning.cells import CellSpec
from orchestrator.sweep.planning.spec import EngineKind


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
    options = cell.engine_options
    on_cpu = cell.device == "cpu"
    base = VllmEngineConfig(
        model=model.directory,
        load_format=model.load_format,
        served_model_name=served_name,
        device=cell.device,
        block_size=options.block_size_on(cell.gpu),
        num_kv_blocks=options.num_kv_blocks,
        gpu_memory_utilization=options.gpu_memory_utilization,
        max_model_len=options.max_model_len,
        max_num_seqs=options.max_num_seqs,
        max_num_batched_tokens=options.max_num_batched_tokens,
        enforce_eager=options.enforce_eager if options.enforce_eager is not None else on_cpu,
        tensor_parallel_size=cell.tp,
    )
    engine = policy.engine_config(base, cell.dram_gb)
    return ServedCell(engine, served_name, policy.ordering.sends_priority, model.answer_token_ids)
