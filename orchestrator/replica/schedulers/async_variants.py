"""The tracing and Continuum schedulers on top of vLLM's ``AsyncScheduler``, for GPU engines.

vLLM 0.32 schedules asynchronously on GPU by default (two steps in flight: ``EngineCore.step_with_batch_queue``
schedules step N+1 before step N's output is processed). Only an ``AsyncScheduler`` can put a running request
into step N+1 (its placeholders count the token step N has not returned yet); a synchronous subclass leaves
every decode waiting for the previous step's output, which ``SchedulerConfig.get_scheduler_cls`` warns about
as "async scheduling being disabled" and which would change the baseline being measured.
``orchestrator.policies.catalog`` therefore picks these classes on GPU and the synchronous ones on CPU.

Continuum's pins are safe with two steps in flight; the reasons, from vLLM's code, are in the "Async
scheduling" section of ``continuum``'s docstring. In short: a turn can finish while the next step still
writes its last slot, the pin then holds those blocks (safer than stock vLLM, which frees them at once), the
slot lies past the cached prefix the next turn can hit, and a release waits for the in-flight step exactly
where vLLM's own frees do (``defer_block_free``, with a loading KV connector).

The method order is ``ContinuumScheduler`` -> ``TracingScheduler`` -> ``AsyncScheduler`` -> ``Scheduler``: our
hooks run first and call on with ``super()``; ``AsyncScheduler``'s own overrides (``_update_after_schedule``,
``_update_request_with_output``) are reached from inside ``Scheduler.schedule`` and ``update_from_output``.
The CPU engine turns async scheduling off whatever the flags say (``CpuPlatform.check_and_update_config``),
so tests/replica/test_async_continuum.py runs these classes with two steps in flight in-process, and on the
CPU engine with that reset undone.
"""

from __future__ import annotations

from vllm.v1.core.sched.async_scheduler import AsyncScheduler

from orchestrator.replica.schedulers.continuum import ContinuumScheduler
from orchestrator.replica.schedulers.tracing import TracingScheduler


class AsyncTracingScheduler(TracingScheduler, AsyncScheduler):
    pass


class AsyncContinuumScheduler(ContinuumScheduler, AsyncScheduler):
    pass
