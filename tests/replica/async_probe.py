"""Test-only helpers for running ``AsyncContinuumScheduler`` with two engine steps in flight on the CPU engine.

vLLM 0.32's CPU platform turns async scheduling off whatever the command line says
(``CpuPlatform.check_and_update_config`` sets ``scheduler_config.async_scheduling = False`` after
``VllmConfig.__post_init__`` accepted ``--async-scheduling``), so the engine core keeps one batch in flight.
The ``sitecustomize`` module that ``write_sitecustomize`` writes undoes only that assignment, so the engine
core runs its batch queue of two (``EngineCore.step_with_batch_queue``) as on GPU: step N+1 is scheduled
before step N's output is processed. The CPU model runner is vLLM's GPU runner with CUDA streams stubbed out,
and it serves this configuration: on the tiny model it returned the same tokens as the synchronous engine.
Nothing outside the engine tests uses it.

``ProbeAsyncContinuumScheduler`` adds ``probe_*`` events to the scheduler trace, for the test to tell that
the two-in-flight paths really ran: requests that finished while a step still held a placeholder for them,
in-flight outputs vLLM discarded because their request had finished, and, whenever the engine goes idle, the
reference counts of the whole block pool (a leak or a double free shows there).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from orchestrator.replica.schedulers.async_variants import AsyncContinuumScheduler
from orchestrator.replica.schedulers.tracing import JobTag

FORCE_ENV = "KVSWEEP_TEST_KEEP_CPU_ASYNC"

# Imports only vLLM's CPU platform module, which the server imports anyway, and only when asked to.
_SITECUSTOMIZE = f"""\
import os

if os.environ.get({FORCE_ENV!r}) == "1":
    from vllm.platforms.cpu import CpuPlatform

    _check_and_update_config = CpuPlatform.check_and_update_config.__func__

    def _keep_async_scheduling(cls, vllm_config):
        requested = vllm_config.scheduler_config.async_scheduling
        _check_and_update_config(cls, vllm_config)
        if requested:
            vllm_config.scheduler_config.async_scheduling = True

    CpuPlatform.check_and_update_config = classmethod(_keep_async_scheduling)
"""


def write_sitecustomize(directory: Path) -> Path:
    """A ``sitecustomize.py`` in ``directory`` that keeps ``--async-scheduling`` on the CPU platform when
    ``FORCE_ENV`` is 1 in the server's environment; put ``directory`` first on the server's ``PYTHONPATH``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return directory


class ProbeAsyncContinuumScheduler(AsyncContinuumScheduler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scheduler_trace.write(
            {
                "kind": "probe_config",
                "async_scheduling": bool(self.vllm_config.scheduler_config.async_scheduling),
                "max_concurrent_batches": self.vllm_config.max_concurrent_batches,
                "num_blocks": self.kv_cache_manager.block_pool.num_gpu_blocks,
                "pid": os.getpid(),
            }
        )

    def schedule(self, *args, **kwargs):
        output = super().schedule(*args, **kwargs)
        # Two placeholders: this step and the one before it are both in flight for the request.
        overlapped = [r.request_id for r in self.running if r.num_output_placeholders >= 2]
        if overlapped:
            self.scheduler_trace.write({"kind": "probe_overlap", "t": time.time(), "requests": len(overlapped)})
        return output

    def update_from_output(self, scheduler_output, model_runner_output):
        discarded = [req_id for req_id in scheduler_output.num_scheduled_tokens if req_id not in self.requests]
        if discarded:
            self.scheduler_trace.write({"kind": "probe_discarded", "t": time.time(), "request_ids": discarded})
        return super().update_from_output(scheduler_output, model_runner_output)

    def retain_finished_blocks(self, request: Any, tag: JobTag) -> bool:
        # Placeholders left at finish: a scheduled step that will still write this request's last slot.
        self.scheduler_trace.write(
            {
                "kind": "probe_finish",
                "t": time.time(),
                "request_id": request.request_id,
                "job_id": tag.job_id,
                "in_flight_tokens": request.num_output_placeholders,
                "status": str(request.status),
            }
        )
        return super().retain_finished_blocks(request, tag)

    def _flush_when_idle(self) -> None:
        if not self.has_unfinished_requests():
            blocks = [b for b in self.kv_cache_manager.block_pool.blocks if not b.is_null]
            self.scheduler_trace.write(
                {
                    "kind": "probe_idle",
                    "t": time.time(),
                    "pinned_blocks": self.num_pinned_blocks,
                    "referenced_blocks": sum(1 for b in blocks if b.ref_cnt > 0),
                    "min_ref_cnt": min(b.ref_cnt for b in blocks),
                    "free_blocks": self.free_blocks(),
                    "usable_blocks": len(blocks),
                    "deferred_frees": len(self.deferred_frees),
                }
            )
        super()._flush_when_idle()
