"""What becomes of a finished turn's KV: freed to vLLM's prefix cache (stock vLLM), or pinned for the job's next
turn (Continuum).

On a real engine a retention is the scheduler plugin vLLM loads (the tracing scheduler, or Continuum's subclass of
it, with its rules in the environment); in the simulator it is a ``SimRetention`` the scheduler and engine call at
each point a pin can change. Continuum's decisions are ``continuum_rules``'s, shared with the plugin, so the two
cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from orchestrator.mechanisms.tier import Evidence
from orchestrator.records.cell import CellOutcome
from orchestrator.records.scheduler_trace import Unpin, UnpinReason
from orchestrator.records.scheduler_trace_file import trace_events
from orchestrator.replica.schedulers import continuum_rules as rules
from orchestrator.replica.schedulers.pins import ContinuumConfig, Pin, PinTable

if TYPE_CHECKING:
    from orchestrator.mechanisms.request_queue import RequestQueue
    from orchestrator.sim.scheduler import SimRequest

_SCHEDULERS = "orchestrator.replica.schedulers"
TRACING = f"{_SCHEDULERS}.tracing.TracingScheduler"
CONTINUUM = f"{_SCHEDULERS}.continuum.ContinuumScheduler"
# On GPU vLLM schedules asynchronously by default; these keep that behaviour under our subclasses.
ASYNC_TRACING = f"{_SCHEDULERS}.async_variants.AsyncTracingScheduler"
ASYNC_CONTINUUM = f"{_SCHEDULERS}.async_variants.AsyncContinuumScheduler"


class SimRetention:
    """The simulator's hooks of a retention that keeps nothing: every finished turn is freed."""

    num_pinned_blocks: int = 0

    def arrived(self, request: SimRequest, priority: int) -> int:
        """A turn joins the waiting queue; returns the priority it waits with."""
        return priority

    def holds(self, job_id: str) -> bool:
        return False

    def next_expiry(self) -> float | None:
        return None

    def take_expired(self, now: float, waiting: RequestQueue) -> list[Pin]:
        return []

    def take_for_aborted_job(self, job_id: str) -> Pin | None:
        return None

    def take_for_next_turn(self, job_id: str) -> Pin | None:
        return None

    def take_pressure_victim(self, request: SimRequest, num_others_running: int) -> Pin | None:
        return None

    def must_wait_for_reserve(self, request: SimRequest, num_free_blocks: int, running: Sequence[SimRequest],
                              block_size: int) -> bool:  # fmt: skip
        return False

    def keeps_finished(self, request: SimRequest, block_size: int) -> bool:
        return False

    def pin(self, request: SimRequest, blocks: Iterable[Any], now: float) -> list[Pin]:
        """Pin ``request``'s blocks for its job's next turn; returns the pins this one replaced."""
        raise AssertionError("a retention that keeps nothing pins nothing")


class PinRetention(SimRetention):
    """Continuum's pins in a simulated replica: one ``PinTable``, every decision ``continuum_rules``'s."""

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


@dataclass(frozen=True)
class Retention:
    """Stock vLLM: a finished turn's blocks go back to the prefix cache's free queue."""

    name: ClassVar[str] = "free"

    @property
    def pins(self) -> ContinuumConfig | None:
        """The pin rules the simulator's configuration records (None: it pins nothing)."""
        return None

    def scheduler_cls(self, on_gpu: bool) -> str:
        return ASYNC_TRACING if on_gpu else TRACING

    def env(self) -> dict[str, str]:
        return {}

    def evidence(self, outcome: CellOutcome) -> Evidence | None:
        """What a cell shows of it (None: nothing of its own; the prefix cache's check applies)."""
        return None


@dataclass(frozen=True)
class ContinuumPins(Retention):
    """Continuum: a finished turn's blocks stay pinned until its job's next turn, its TTL, or pressure."""

    config: ContinuumConfig = ContinuumConfig()

    name = "continuum-pins"

    @property
    def pins(self) -> ContinuumConfig:
        return self.config

    def scheduler_cls(self, on_gpu: bool) -> str:
        return ASYNC_CONTINUUM if on_gpu else CONTINUUM

    def env(self) -> dict[str, str]:
        return self.config.to_env()

    def evidence(self, outcome: CellOutcome) -> Evidence:
        events = trace_events(outcome.scheduler_trace)
        carried = sum(isinstance(event, Unpin) and event.reason is UnpinReason.NEXT_TURN for event in events)
        return Evidence(carried > 0, f"{carried} pins carried a job's KV to its next turn")


def sim_retention(pins: ContinuumConfig | None) -> SimRetention:
    """The simulator's hooks for the pin rules its configuration records."""
    return SimRetention() if pins is None else PinRetention(pins)
