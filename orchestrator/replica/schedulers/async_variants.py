"""The tracing and Continuum schedulers on top of vLLM's ``AsyncScheduler``, for GPU engines.

vLLM schedules asynchronously on GPU by default; replacing the scheduler with a synchronous subclass would
change the baseline being measured. Cooperative ``super()`` calls put our hooks before the async ones.
"""

from __future__ import annotations

from vllm.v1.core.sched.async_scheduler import AsyncScheduler

from orchestrator.replica.schedulers.continuum import ContinuumScheduler
from orchestrator.replica.schedulers.tracing import TracingScheduler


class AsyncTracingScheduler(TracingScheduler, AsyncScheduler):
    pass


class AsyncContinuumScheduler(ContinuumScheduler, AsyncScheduler):
    pass
