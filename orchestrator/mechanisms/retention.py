"""What becomes of a finished turn's KV: freed to vLLM's prefix cache (stock vLLM, here), or pinned for the job's
next turn (Continuum, ``continuum.retention``).

On a real engine a retention is the scheduler plugin vLLM loads (the tracing scheduler, or Continuum's subclass of
it, with its rules in the environment); in the simulator it is a ``SimRetention`` the scheduler and engine call at
each point a pin can change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from orchestrator.mechanisms.tier import Evidence
from orchestrator.records.cell import CellOutcome

if TYPE_CHECKING:
    from orchestrator.mechanisms.continuum.config import ContinuumConfig
    from orchestrator.mechanisms.continuum.pins import Pin
    from orchestrator.mechanisms.request import SimRequest
    from orchestrator.mechanisms.request_queue import RequestQueue

SCHEDULERS = "orchestrator.replica.schedulers"  # the vLLM plugins' package
TRACING = f"{SCHEDULERS}.tracing.TracingScheduler"
# On GPU vLLM schedules asynchronously by default; this keeps that behaviour under our subclass.
ASYNC_TRACING = f"{SCHEDULERS}.async_variants.AsyncTracingScheduler"


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


@dataclass(frozen=True)
class Retention:
    """Stock vLLM: a finished turn's blocks go back to the prefix cache's free queue."""

    name: ClassVar[str] = "free"

    @property
    def pins(self) -> ContinuumConfig | None:
        """The pin rules the simulator's configuration records (None: it pins nothing)."""
        return None

    def sim_hooks(self) -> SimRetention:
        """What the simulator's scheduler asks of it at every point a pin can be taken, released or waited for."""
        return SimRetention()

    def scheduler_cls(self, on_gpu: bool) -> str:
        return ASYNC_TRACING if on_gpu else TRACING

    def env(self) -> dict[str, str]:
        return {}

    def evidence(self, outcome: CellOutcome) -> Evidence | None:
        """What a cell shows of it (None: nothing of its own; the prefix cache's check applies)."""
        return None
