"""Continuum's retention: a finished turn's blocks stay pinned for its job's next turn. ``ContinuumPins`` is what a
policy composes (the vLLM plugin it loads and the rules it passes in the environment), ``PinRetention`` its hooks in
the simulator's scheduler; both decide with ``rules``, the plugin's decisions too, so the two cannot drift apart."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.mechanisms.continuum import rules
from orchestrator.mechanisms.continuum.config import ContinuumConfig
from orchestrator.mechanisms.continuum.pins import Pin, PinTable
from orchestrator.mechanisms.retention import SCHEDULERS, Retention, SimRetention
from orchestrator.mechanisms.tier import Evidence
from orchestrator.records.cell import CellOutcome
from orchestrator.records.scheduler_trace import Unpin, UnpinReason
from orchestrator.records.scheduler_trace_file import trace_events

if TYPE_CHECKING:
    from orchestrator.mechanisms.request import SimRequest
    from orchestrator.mechanisms.request_queue import RequestQueue

CONTINUUM = f"{SCHEDULERS}.continuum.ContinuumScheduler"
ASYNC_CONTINUUM = f"{SCHEDULERS}.async_variants.AsyncContinuumScheduler"


@dataclass(frozen=True)
class ContinuumPins(Retention):
    """Continuum: a finished turn's blocks stay pinned until its job's next turn, its TTL, or pressure."""

    config: ContinuumConfig = ContinuumConfig()

    name = "continuum-pins"

    @property
    def pins(self) -> ContinuumConfig:
        return self.config

    def sim_hooks(self) -> PinRetention:
        return PinRetention(self.config)

    def scheduler_cls(self, on_gpu: bool) -> str:
        return ASYNC_CONTINUUM if on_gpu else CONTINUUM

    def env(self) -> dict[str, str]:
        return self.config.to_env()

    def evidence(self, outcome: CellOutcome) -> Evidence:
        events = trace_events(outcome.scheduler_trace)
        carried = sum(isinstance(event, Unpin) and event.reason is UnpinReason.NEXT_TURN for event in events)
        return Evidence(carried > 0, f"{carried} pins carried a job's KV to its next turn")


class PinRetention(SimRetention):
    """Continuum's pins in a simulated replica: one ``PinTable``, every decision ``rules``'s."""

    def __init__(self, config: ContinuumConfig):
        self.table = PinTable(config)

    @property
    def num_pinned_blocks(self) -> int:
        return self.table.num_pinned_blocks

    def arrived(self, request: SimRequest, priority: int) -> int:
        self.table.on_turn_arrived(request.job_id, request.arrival)
        return rules.waiting_priority(self.table, request, priority)

    def holds(self, job_id: str) -> bool:
        return job_id in self.table

    def next_expiry(self) -> float | None:
        return self.table.next_expiry()

    def take_expired(self, now: float, waiting: RequestQueue) -> list[Pin]:
        return self.table.take_expired(now, waiting.job_ids())

    def take_for_aborted_job(self, job_id: str) -> Pin | None:
        return rules.take_for_aborted_job(self.table, job_id)

    def take_for_next_turn(self, job_id: str) -> Pin | None:
        return rules.take_for_next_turn(self.table, job_id)

    def take_pressure_victim(self, request: SimRequest, num_others_running: int) -> Pin | None:
        return rules.take_pressure_victim(self.table, request, num_others_running)

    def must_wait_for_reserve(self, request: SimRequest, num_free_blocks: int, running: Sequence[SimRequest],
                              block_size: int) -> bool:  # fmt: skip
        running_job_tokens = (other.num_tokens for other in running if not other.is_last)
        return rules.must_wait_for_reserve(
            self.table, request, num_computed_tokens=request.num_computed, num_tokens=request.num_tokens,
            num_free_blocks=num_free_blocks, running_job_tokens=running_job_tokens, block_size=block_size,
        )  # fmt: skip

    def keeps_finished(self, request: SimRequest, block_size: int) -> bool:
        return rules.keeps_finished_blocks(self.table, request, request.num_tokens, block_size)

    def pin(self, request: SimRequest, blocks: Iterable[Any], now: float) -> list[Pin]:
        return self.table.pin(request.job_id, request.job_index, blocks, now)
