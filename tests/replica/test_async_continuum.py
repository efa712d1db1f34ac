"""AsyncContinuumScheduler with two engine steps in flight, as vLLM runs it on GPU.

The CPU engine never schedules asynchronously (vLLM's ``CpuPlatform.check_and_update_config`` resets
``--async-scheduling``), so these tests drive the real scheduler in-process in the order of vLLM's
``EngineCore.step_with_batch_queue`` (step N+1 is scheduled before step N's output is processed), with a
model that samples a planned token sequence. The engine test at the end runs it on the CPU engine with that
reset undone (see ``async_probe``).
"""

from __future__ import annotations

import collections
import json
import time
import urllib.request
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from orchestrator.mechanisms.continuum.config import CONFIG_ENV
from orchestrator.replica.vllm_server import TRACE_ENV

BLOCK = 32
STOP = 7  # the planned stop token
FILLER = 9


class TwoStepEngine:
    """A real ``AsyncContinuumScheduler`` driven like ``EngineCore.step_with_batch_queue`` with a batch queue
    of two; request ``r`` samples ``FILLER`` until its planned ``STOP`` (or its ``max_tokens``)."""

    def __init__(self, vllm_config, num_blocks: int):
        import torch
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.structured_output import StructuredOutputManager

        from orchestrator.replica.schedulers.async_variants import AsyncContinuumScheduler

        vllm_config.cache_config.num_gpu_blocks = num_blocks
        spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=64, dtype=torch.bfloat16)
        kv_cache_config = KVCacheConfig(
            num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)]
        )
        self.scheduler = AsyncContinuumScheduler(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=BLOCK,
        )
        hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self._hasher = get_request_block_hasher(BLOCK, hash_fn)
        self._stop_at: dict[str, int | None] = {}
        self._samples: collections.Counter = collections.Counter()
        self.queue: deque = deque()  # (scheduler output, sampled tokens), newest first as in vLLM
        self.admitted: dict[str, int] = {}  # request id -> tokens hit in the prefix cache
        self.finished: list = []  # requests in finishing order
        self.in_flight_at_finish: dict[str, int] = {}  # request id -> placeholders when its blocks were taken
        self.discarded: list[str] = []  # outputs of in-flight steps for requests already finished
        self.max_in_flight = 0
        self._watch_finishes()

    def _watch_finishes(self) -> None:
        retain = self.scheduler.retain_finished_blocks

        def retain_and_record(request, tag):
            self.in_flight_at_finish[request.request_id] = request.num_output_placeholders
            self.finished.append(request)
            return retain(request, tag)

        self.scheduler.retain_finished_blocks = retain_and_record

    def add(self, request_id, prompt, job, index, turn, last, stop_at=None, max_tokens=64):
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        params = SamplingParams(
            max_tokens=max_tokens,
            stop_token_ids=[STOP],
            extra_args={"job_id": job, "job_index": index, "turn": turn, "is_last_step": last},
        )
        request = Request(request_id, list(prompt), params, None, block_hasher=self._hasher)
        self._stop_at[request_id] = stop_at
        self.scheduler.add_request(request)
        return request

    def schedule(self):
        output = self.scheduler.schedule()
        for new in output.scheduled_new_reqs:
            self.admitted[new.req_id] = new.num_computed_tokens
        sampled = {}
        for request_id in output.num_scheduled_tokens:
            request = self.scheduler.requests[request_id]
            self.max_in_flight = max(self.max_in_flight, request.num_output_placeholders)
            if request.is_prefill_chunk:
                sampled[request_id] = []
                continue
            self._samples[request_id] += 1
            sampled[request_id] = [STOP if self._samples[request_id] == self._stop_at[request_id] else FILLER]
        self.queue.appendleft((output, sampled))
        return output

    def process(self):
        from vllm.v1.outputs import ModelRunnerOutput

        output, sampled = self.queue.pop()
        ids = list(output.num_scheduled_tokens)
        self.discarded += [request_id for request_id in ids if request_id not in self.scheduler.requests]
        result = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={request_id: i for i, request_id in enumerate(ids)},
            sampled_token_ids=[sampled[request_id] for request_id in ids],
        )
        return self.scheduler.update_from_output(output, result)

    def step(self) -> None:
        """One call of ``step_with_batch_queue``: fill the queue first, else process the oldest step."""
        if self.scheduler.has_requests():
            output = self.schedule()
            if len(self.queue) < 2 and (output.total_num_scheduled_tokens > 0 or self.scheduler.has_requests()):
                return
        if self.queue:
            self.process()

    def run_until_idle(self, max_steps: int = 2000) -> None:
        for _ in range(max_steps):
            if not self.scheduler.has_requests() and not self.queue:
                return
            self.step()
        raise AssertionError("the engine did not go idle")

    def scheduler_trace(self) -> list[dict]:
        self.scheduler.scheduler_trace.flush()
        with open(self.trace_path) as trace:
            return [json.loads(line) for line in trace]

    def referenced_blocks(self) -> int:
        return sum(1 for block in self.scheduler.kv_cache_manager.block_pool.blocks if block.ref_cnt > 0)


@pytest.fixture(scope="module")
def vllm_config(tiny_model_dir):
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(
        model=str(tiny_model_dir), block_size=BLOCK, max_model_len=1024, enforce_eager=True,
        enable_prefix_caching=True, num_gpu_blocks_override=64, kv_cache_memory_bytes=1 << 30,
    )  # fmt: skip
    return args.create_engine_config()


@pytest.fixture
def engine_factory(vllm_config, tmp_path, monkeypatch):
    def make(num_blocks: int = 64, **continuum) -> TwoStepEngine:
        trace_path = tmp_path / "trace.jsonl"
        monkeypatch.setenv(TRACE_ENV, str(trace_path))
        monkeypatch.setenv(CONFIG_ENV, json.dumps({"ttl_s": 60.0, **continuum}))
        engine = TwoStepEngine(vllm_config, num_blocks)
        engine.trace_path = trace_path
        return engine

    return make


def _unpins(engine: TwoStepEngine) -> list[tuple[str, str]]:
    return [(event["job_id"], event["reason"]) for event in engine.scheduler_trace() if event["kind"] == "unpin"]


def test_a_turn_that_stops_with_a_step_in_flight_is_pinned_whole_and_its_next_turn_hits_it(engine_factory):
    engine = engine_factory()
    prompt = list(range(10, 110))  # 100 tokens: 4 blocks
    turn1 = engine.add("j0-t1", prompt, "j0", 0, turn=1, last=False, stop_at=3)
    engine.run_until_idle()

    # Both steps were in flight at once, and the turn stopped (its third sample) while the step after it,
    # already scheduled, still held a placeholder: that step's token was discarded.
    assert engine.max_in_flight == 2
    assert engine.in_flight_at_finish["j0-t1"] == 1
    assert engine.discarded == ["j0-t1"]
    assert list(turn1.output_token_ids) == [FILLER, FILLER, STOP]
    # The pin holds every block the turn had, including the one the in-flight step wrote to.
    assert engine.scheduler.num_pinned_blocks == 4 == engine.referenced_blocks()

    # The next turn hits every full block computed before that step: 102 tokens had KV -> 3 blocks.
    prompt2 = prompt + list(turn1.output_token_ids) + list(range(200, 240))
    engine.add("j0-t2", prompt2, "j0", 0, turn=2, last=True, stop_at=2)
    engine.run_until_idle()
    assert engine.admitted["j0-t2"] == 3 * BLOCK
    assert _unpins(engine) == [("j0", "next_turn")]
    assert engine.scheduler.num_pinned_blocks == 0 and engine.referenced_blocks() == 0
    assert engine.scheduler.free_blocks() == 63


def test_many_jobs_under_pressure_leave_no_block_referenced_or_freed_twice(engine_factory):
    engine = engine_factory(num_blocks=24)  # 23 usable blocks; four jobs of 4-6 blocks each must share
    prompts = {f"j{i}": [100 + i] + list(range(10, 110)) for i in range(4)}
    turns = 3
    pending = {job: 1 for job in prompts}
    last_request: dict = {}
    for job in prompts:
        index = int(job[1:])
        last_request[job] = engine.add(f"{job}-t1", prompts[job], job, index, 1, turns == 1, stop_at=2 + index)
    for _ in range(5000):
        engine.step()
        for job, request in list(last_request.items()):
            if not request.is_finished() or pending[job] == turns:
                continue
            # The client sends the next turn once it has the answer, while a step may still be in flight.
            pending[job] += 1
            turn = pending[job]
            prompts[job] = prompts[job] + list(request.output_token_ids) + list(range(200 + turn, 230 + turn))
            index = int(job[1:])
            last_request[job] = engine.add(
                f"{job}-t{turn}", prompts[job], job, index, turn, turn == turns, stop_at=1 + (index + turn) % 4
            )
        if all(pending[job] == turns and last_request[job].is_finished() for job in prompts) and not engine.queue:
            break
    engine.run_until_idle()

    assert len(engine.finished) == 4 * turns
    assert engine.max_in_flight == 2
    assert any(engine.in_flight_at_finish.values()), "no turn finished with a step in flight"
    assert engine.discarded
    events = engine.scheduler_trace()
    pinned = [e for e in events if e["kind"] == "finish" and e["action"] == "pin"]
    unpinned = [e for e in events if e["kind"] == "unpin"]
    assert len(pinned) == 4 * (turns - 1) == len(unpinned)
    assert "pressure" in {e["reason"] for e in unpinned}  # the pool is small enough for pins to give way
    # Every block is back in the pool exactly once: no reference left, none negative, all free.
    blocks = [b for b in engine.scheduler.kv_cache_manager.block_pool.blocks if not b.is_null]
    assert min(b.ref_cnt for b in blocks) == 0 and max(b.ref_cnt for b in blocks) == 0
    assert engine.scheduler.free_blocks() == 23
    assert engine.scheduler.kv_cache_manager.reset_prefix_cache()


@pytest.mark.parametrize("defer", [False, True])
def test_a_pin_released_while_its_turns_last_step_is_in_flight_waits_where_vllm_defers_frees(engine_factory, defer):
    # ttl 0: the pin expires at the very next schedule(), while the step after the turn's stop still runs.
    engine = engine_factory(ttl_s=0.0)
    # vLLM sets this when a loading KV connector runs with more than one batch in flight; set before any step.
    engine.scheduler.defer_block_free = defer
    engine.add("other", list(range(300, 340)), "other", 1, turn=1, last=True, stop_at=None, max_tokens=40)
    engine.add("j0-t1", list(range(10, 110)), "j0", 0, turn=1, last=False, stop_at=2)
    while "j0-t1" not in engine.in_flight_at_finish:
        engine.step()
    assert engine.in_flight_at_finish["j0-t1"] == 1 and len(engine.queue) == 1  # step N+1 is still queued
    pinned = engine.referenced_blocks()

    engine.schedule()  # step N+2: the pin's TTL is over
    assert _unpins(engine) == [("j0", "ttl")]
    if defer:
        # Not yet back in the pool: it waits in vLLM's own queue for step N+1 to be processed.
        assert engine.referenced_blocks() == pinned and len(engine.scheduler.deferred_frees) == 1
        engine.process()  # step N+1
        assert not engine.scheduler.deferred_frees
    assert engine.referenced_blocks() == pinned - 4  # only "other"'s blocks remain in use
    engine.run_until_idle()
    assert engine.referenced_blocks() == 0 and engine.scheduler.free_blocks() == 63


# --- The CPU engine, with async scheduling kept on. ---

JOBS, TURNS = 4, 4


def _complete(base_url: str, prompt: str, job: int, turn: int) -> dict:
    body = {
        "model": "tiny", "prompt": prompt, "max_tokens": 12, "min_tokens": 2, "temperature": 0,
        # Roughly every other token stops a turn, so most turns stop while the next step is in flight.
        "stop_token_ids": list(range(4, 60)), "priority": job,
        "vllm_xargs": {"job_id": f"job{job}", "job_index": job, "turn": turn, "is_last_step": turn == TURNS},
    }  # fmt: skip
    request = urllib.request.Request(
        base_url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def _run_job(base_url: str, job: int) -> list[dict]:
    prompt = f"[job{job}]" + " river" * 100
    usages = []
    for turn in range(1, TURNS + 1):
        answer = _complete(base_url, prompt, job, turn)
        usages.append({**answer["usage"], "finish_reason": answer["choices"][0]["finish_reason"]})
        prompt += answer["choices"][0]["text"] + " cedar" * 40  # the tool's output
        time.sleep(0.1)
    return usages


@pytest.mark.engine
def test_async_continuum_on_the_cpu_engine_with_two_steps_in_flight(tiny_model_dir, tmp_path):
    """A real server with async scheduling on: only vLLM's own engine core and batch queue show that the
    two-step driver above matches it (steps overlap, pins released at the next turn, every full block hit)."""
    from orchestrator.paths import PROJECT_ROOT
    from orchestrator.policies.catalog import get_policy
    from orchestrator.replica.config import VllmEngineConfig
    from orchestrator.replica.replica import Replica
    from tests.replica.async_probe import FORCE_ENV, write_sitecustomize

    base = VllmEngineConfig(
        model=str(tiny_model_dir), served_model_name="tiny", num_kv_blocks=64, max_model_len=1024, max_num_seqs=8
    )
    engine = get_policy("continuum").engine_config(base, dram_gb=0)
    site = write_sitecustomize(tmp_path / "site")
    engine = engine.model_copy(
        update={
            "scheduler_cls": "tests.replica.async_probe.ProbeAsyncContinuumScheduler",
            "extra_args": (*engine.extra_args, "--async-scheduling"),
            "extra_env": (
                *(item for item in engine.extra_env if item[0] != CONFIG_ENV),
                (CONFIG_ENV, json.dumps({"ttl_s": 60.0})),  # pins, not the TTL, decide on 2 busy cores
                (FORCE_ENV, "1"),
                ("PYTHONPATH", f"{site}:{PROJECT_ROOT}"),
            ),
        }
    )
    replica = Replica(engine, tmp_path / "replica")
    replica.start()
    try:
        with ThreadPoolExecutor(JOBS) as pool:
            jobs = list(pool.map(lambda job: _run_job(replica.info.base_url, job), range(JOBS)))
        time.sleep(1.0)  # the trace is flushed when the engine goes idle
        with open(replica.info.trace_path) as trace:
            events = [json.loads(line) for line in trace]
        replica.reset()  # vLLM refuses a prefix-cache reset while any block is still held
        log = Path(replica.info.log_path).read_text()
    finally:
        replica.stop()

    kinds = collections.Counter(event["kind"] for event in events)
    (config,) = [event for event in events if event["kind"] == "probe_config"]
    assert config["async_scheduling"] and config["max_concurrent_batches"] == 2
    assert kinds["probe_overlap"] > 0  # a request had placeholders for two steps at once
    in_flight = {e["request_id"] for e in events if e["kind"] == "probe_finish" and e["in_flight_tokens"] > 0}
    assert in_flight and kinds["probe_discarded"] > 0
    finishes = [event for event in events if event["kind"] == "finish"]
    assert len(finishes) == JOBS * TURNS
    assert any(e["action"] == "pin" and e["request_id"] in in_flight for e in finishes)
    assert sum(e["action"] == "pin" for e in finishes) == JOBS * (TURNS - 1)
    assert [e["reason"] for e in events if e["kind"] == "unpin"] == ["next_turn"] * (JOBS * (TURNS - 1))
    idle = [event for event in events if event["kind"] == "probe_idle"][-1]
    assert idle["pinned_blocks"] == idle["referenced_blocks"] == idle["min_ref_cnt"] == 0
    assert idle["free_blocks"] == idle["usable_blocks"]
    for usages in jobs:
        assert all(usage["finish_reason"] in ("stop", "length") for usage in usages)
        for before, after in zip(usages, usages[1:]):
            # Every full block whose KV the previous turn computed (all but its last token) is hit.
            expected = (before["prompt_tokens"] + before["completion_tokens"] - 1) // BLOCK * BLOCK
            assert after["prompt_tokens_details"]["cached_tokens"] == expected
    assert "Traceback" not in log and " ERROR " not in log
