"""The cell worker's watchdog, in this process against the fake engine (no Ray): hang, time limit, crash."""

import os
import signal
import threading
import time
from dataclasses import replace

import pytest

from orchestrator.cell.spec import EngineKind
from orchestrator.records.cell import CellStatus, FailureKind
from orchestrator.replica import keeper as keeper_module
from orchestrator.replica import replica as replica_module
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import RunLimits
from orchestrator.sweep.runtime import worker as worker_module
from orchestrator.sweep.runtime.worker import CellWorker
from tests.processes import fake_engine_processes, replica_processes, wait_until_gone
from tests.sweep.conftest import fake_spec

LIMITS = RunLimits(health_timeout_s=60, hang_timeout_s=2, poll_s=0.2, client_actors=0)


@pytest.fixture
def fake_engine_with(monkeypatch):
    """Cells get the fake engine with the given settings (a fault injected into the stand-in server)."""

    def configure(**settings):
        real = worker_module.served_cell

        def served(cell, model):
            cell_served = real(cell, model)
            return replace(cell_served, engine=cell_served.engine.model_copy(update=settings))

        monkeypatch.setattr(worker_module, "served_cell", served)

    return configure


def run_one(limits: RunLimits, jps: float = 2, duration_s: float = 2):
    cell = expand(fake_spec("faults", jps=(jps,)))[0]
    cell = cell.model_copy(update={"workload": cell.workload.model_copy(update={"duration_s": duration_s})})
    worker = CellWorker(node_id="local")
    try:
        return worker.run(cell, limits)
    finally:
        worker.shutdown()


def test_a_healthy_cell_is_done_with_every_record():
    """The baseline of the faults below: a fake-engine server process started, driven and stopped by the worker."""
    outcome = run_one(LIMITS)
    assert outcome.status is CellStatus.DONE and outcome.reason is None
    assert len(outcome.jobs) > 0 and len(outcome.requests) == 8 * len(outcome.jobs)
    assert outcome.config.engine_facts.vllm_version == "fake-engine"


def test_an_engine_that_stops_making_progress_is_marked_hung_and_torn_down(fake_engine_with):
    fake_engine_with(stall_after=5)
    started = time.monotonic()
    outcome = run_one(LIMITS)
    assert outcome.status is CellStatus.HUNG and not outcome.retryable
    assert outcome.failure_kind is FailureKind.NO_PROGRESS
    assert outcome.reason.startswith("no engine progress for 2 s with") and outcome.requests == ()
    assert time.monotonic() - started < 30  # the watchdog ended it, not a request timeout
    assert wait_until_gone() == []


def test_a_slow_but_working_engine_is_not_hung_but_stops_at_the_cell_time_limit(fake_engine_with):
    fake_engine_with(token_delay_s=0.3)  # tokens keep coming: progress, but a turn takes 6 s
    outcome = run_one(LIMITS.model_copy(update={"cell_timeout_s": 4.0, "hang_timeout_s": 1.0}))
    assert outcome.status is CellStatus.FAILED and outcome.reason == "cell time limit of 4 s exceeded"
    assert outcome.failure_kind is FailureKind.TIME_LIMIT
    assert wait_until_gone() == []


def test_a_slow_replica_start_is_waited_for_and_said_and_a_hung_one_fails_the_attempt_in_seconds(fake_engine_with):
    """Under a start limit of 60 s and a stall limit of 1.5 s: the slow engine loads for 2.5 s with a line a second and
    its cell is done, with the start time recorded; the hung one is ended 1.5 s after its last sign of life, retryable."""
    limits = LIMITS.model_copy(update={"start_stall_s": 1.5})
    fake_engine_with(start_s=2.5)
    outcome = run_one(limits)
    assert outcome.status is CellStatus.DONE and outcome.config.replica_start_s >= 2.5
    fake_engine_with(start_hangs=True)
    started = time.monotonic()
    outcome = run_one(limits)
    assert outcome.status is CellStatus.FAILED and outcome.retryable
    assert outcome.failure_kind is FailureKind.REPLICA_START
    assert outcome.reason.startswith("replica did not start: server hung while starting: no log output, CPU time or "
                                     "I/O for 1.5 s")  # fmt: skip
    assert "fake engine: loading" in outcome.server_log and time.monotonic() - started < 30
    assert wait_until_gone() == []


def test_a_replica_that_dies_mid_cell_fails_the_cell_as_retryable_with_its_log():
    def kill_the_engine_once_it_serves():
        deadline = time.monotonic() + 30
        while not (found := fake_engine_processes()) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)
        os.killpg(found[0][0], signal.SIGKILL)

    killer = threading.Thread(target=kill_the_engine_once_it_serves)
    killer.start()
    outcome = run_one(LIMITS, duration_s=4)
    killer.join()
    assert outcome.status is CellStatus.FAILED and outcome.retryable and outcome.failure_kind is FailureKind.ENGINE_CRASH
    assert outcome.reason == "replica exited with code -9 during the cell"
    assert outcome.config.server_argv  # what was running is still reported


def run_two_on_one_replica(limits: RunLimits):
    """Two cells of one server configuration on one worker: the second may reuse the first's replica."""
    first, second = expand(fake_spec("reuse", jps=(2, 3)))[:2]
    worker = CellWorker(node_id="local")
    try:
        return worker.run(first, limits), worker.run(second, limits)
    finally:
        worker.shutdown()


def test_a_replica_whose_reset_is_proven_clean_is_reused():
    """Two cells on one live fake-engine server: reuse needs a server whose cache the worker proves empty."""
    first, second = run_two_on_one_replica(LIMITS)
    assert first.status is second.status is CellStatus.DONE
    assert first.config.replica_reused is False and first.config.replica_start_s > 0
    assert second.config.replica_reused is True and second.config.replica_replaced is None
    # What each spent before its load: the first its server's start and more (the model, the plan); the second a reset.
    assert first.config.setup_s > first.config.replica_start_s and 0 < second.config.setup_s < first.config.setup_s
    proof = second.config.reset_proof
    assert proof.cached_before > 0 and proof.cached_after == 0 and proof.external_hits_after == 0 and proof.clean
    # Within a cell the fake engine's prefix cache does hit (turn t+1 extends turn t), so 0 above is the reset.
    assert any(request.cached_tokens > 0 for request in second.requests)


def test_a_replica_that_reports_a_reset_but_keeps_its_cache_is_detected_and_replaced(fake_engine_with):
    fake_engine_with(reset_keeps_cache=True)  # a stand-in for vLLM's LMCache connector, which keeps its CPU tier
    first, second = run_two_on_one_replica(LIMITS)
    assert first.status is second.status is CellStatus.DONE
    assert second.config.replica_reused is False and second.config.reset_proof is None
    assert second.config.replica_replaced.startswith("reset not proven clean: the engine reported its caches reset, "
                                                          "but a canary prompt cached before the reset came back with 288 "
                                                          "cached tokens")
    first_sent = min(second.requests, key=lambda request: request.sent_at)
    assert first_sent.cached_tokens == 0  # the fresh replica's cache is empty


def test_an_lmcache_cell_refuses_to_start_when_lmcaches_compiled_ops_do_not_load():
    """Here lmcache is not installed at all, the plainest case of ops that do not load; a GPU node with
    lmcache built against another torch is refused the same way, before any replica starts."""
    cell = expand(fake_spec("no-ops", engine=EngineKind.VLLM, gpus=("H100",), policies=("lmcache",), dram_gb=(8,)))[0]
    worker = CellWorker(node_id="local")
    try:
        started = time.monotonic()
        outcome = worker.run(cell, LIMITS)
        assert worker.keeper.launcher is None  # not even the launcher its replicas would fork from: vLLM stays unimported
    finally:
        worker.shutdown()
    assert outcome.status is CellStatus.FAILED and not outcome.retryable and outcome.failure_kind is FailureKind.REFUSED
    assert outcome.reason.startswith("LMCache's compiled CUDA ops did not load (lmcache is not installed)")
    assert "install a tested stack (vllm-0.32 (vllm 0.32.0, lmcache 0.5.6, torch 2.13.0)" in outcome.reason
    assert "vllm-0.26 (vllm 0.26.0, lmcache 0.5.3, torch 2.11.0)" in outcome.reason
    assert time.monotonic() - started < 60 and not replica_processes()


def test_a_model_this_node_cannot_read_fails_the_cell_at_once_without_a_retry(tmp_path, monkeypatch):
    """Where the driver could not check a node (a type that came up later), the worker refuses before any
    replica starts, with the line the driver would have printed."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    cell = expand(fake_spec("unreadable", gpus=("H100",), model="meta-llama/Llama-3.1-8B-Instruct"))[0]
    worker = CellWorker(node_id="local")
    try:
        outcome = worker.run(cell, LIMITS)
    finally:
        worker.shutdown()
    assert outcome.status is CellStatus.FAILED and not outcome.retryable
    assert "'meta-llama/Llama-3.1-8B-Instruct': not in this node's Hugging Face cache" in outcome.reason
    assert "--weights dummy" in outcome.reason and not fake_engine_processes()


@pytest.fixture
def forked_fake_engine(monkeypatch):
    """The fake engine forked from a launcher, as a vLLM server is, with what the launcher preloads given (none:
    no vLLM to preload); ``proven=False`` treats its forked starts as a GPU's are."""

    def configure(preload: tuple[str, ...] = (), proven: bool = True):
        for module in (keeper_module, replica_module):
            monkeypatch.setattr(module, "forks_from_launcher", lambda engine: True)
        monkeypatch.setattr(keeper_module, "launcher_preload", lambda engine: preload)
        monkeypatch.setattr(keeper_module, "forking_proven", lambda engine: proven)
        cell = expand(fake_spec("launcher", jps=(2,)))[0]
        return cell.model_copy(update={"workload": cell.workload.model_copy(update={"duration_s": 1})})

    return configure


def test_a_launcher_that_cannot_be_reached_fails_the_start_for_a_retry_and_the_next_start_has_a_new_one(
    forked_fake_engine,
):
    """The launcher's socket gone, the next start fails retryable and ends that launcher; the start after it has a
    new one."""
    cell = forked_fake_engine()
    worker = CellWorker(node_id="local")
    try:
        assert worker.run(cell, LIMITS).status is CellStatus.DONE
        first, _ = worker.keeper.launcher
        worker.keeper.drop()  # the next cell needs a start
        (worker.keeper.work_dir / "launcher.sock").unlink()
        failed = worker.run(cell, LIMITS)
        assert failed.status is CellStatus.FAILED and failed.failure_kind is FailureKind.REPLICA_START
        assert failed.retryable and "launcher" in failed.reason and first.poll() is not None
        again = worker.run(cell, LIMITS)
        assert again.status is CellStatus.DONE and worker.keeper.launcher[0] is not first
        assert again.config.server_env["VLLM_WORKER_MULTIPROC_METHOD"] == "fork"  # forked from the new launcher
        assert again.config.replica_start.forked and again.config.replica_start.plain_because is None
    finally:
        worker.shutdown()


def test_a_launcher_that_refuses_to_preload_leaves_the_worker_starting_plainly_and_saying_why(forked_fake_engine):
    """A launcher whose preload fails (as one that would touch CUDA ends, saying so) is not started again: this
    cell and the next start their servers as processes of their own, and each record says why."""
    cell = forked_fake_engine(preload=("no_such_module_to_preload",))
    worker = CellWorker(node_id="local")
    try:
        outcomes = [worker.run(cell, LIMITS)]
        worker.keeper.drop()  # the next cell needs a start
        outcomes.append(worker.run(cell, LIMITS))
        launcher = worker.keeper.launcher
    finally:
        worker.shutdown()
    assert [outcome.status for outcome in outcomes] == [CellStatus.DONE] * 2
    for started in outcomes:
        start = started.config.replica_start
        assert not start.forked and "VLLM_WORKER_MULTIPROC_METHOD" not in started.config.server_env
        assert start.plain_because.startswith("the launcher refused: launcher ended before it answered (exit code 1)")
        assert "No module named 'no_such_module_to_preload'" in start.plain_because
    assert launcher is None


def test_where_forking_is_not_proven_a_forked_start_that_exits_is_started_again_plainly(forked_fake_engine):
    """As a forked GPU server that cannot use CUDA after the fork would: every child of this launcher exits at once
    (``tests.sweep.forked_children_exit``). The cell runs on a plain start, and the worker forks no more."""
    cell = forked_fake_engine(preload=("tests.sweep.forked_children_exit",), proven=False)
    worker = CellWorker(node_id="local")
    try:
        first = worker.run(cell, LIMITS)
        worker.keeper.drop()
        second = worker.run(cell, LIMITS)
        launcher = worker.keeper.launcher
    finally:
        worker.shutdown()
    assert first.status is CellStatus.DONE and second.status is CellStatus.DONE
    for outcome in (first, second):
        start = outcome.config.replica_start
        assert not start.forked and start.plain_because == "a forked start failed: server exited with code 3"
    assert worker.keeper.replicas_started == 3 and launcher is None  # the forked start, then two plain ones


def test_where_forking_is_proven_a_forked_start_that_exits_fails_the_cell(forked_fake_engine):
    """On the CPU, where forked starts are proven, an exit is the server's own failure: no second start."""
    cell = forked_fake_engine(preload=("tests.sweep.forked_children_exit",), proven=True)
    worker = CellWorker(node_id="local")
    try:
        outcome = worker.run(cell, LIMITS)
    finally:
        worker.shutdown()
    assert outcome.status is CellStatus.FAILED and outcome.failure_kind is FailureKind.REPLICA_START
    assert "server exited with code 3" in outcome.reason and worker.keeper.replicas_started == 1
