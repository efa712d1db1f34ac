"""Replica lifecycle against the real CPU engine: Continuum pins under pressure, reset, and no survivors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from orchestrator.policies.catalog import get_policy
from orchestrator.replica.config import VllmEngineConfig
from orchestrator.replica.launcher import start_launcher, vllm_preload
from orchestrator.replica.replica import Replica
from orchestrator.replica.vllm_server import shared_environment
from orchestrator.sweep.cluster.inventory import read_inventory
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import EngineOptions, RunLimits, SweepSpec
from orchestrator.sweep.runtime.worker import start_worker
from orchestrator.workload.spec import WorkloadSpec
from tests.processes import replica_processes, wait_for_serving_vllm

pytestmark = pytest.mark.engine


def _complete(base_url: str, prompt: str, job_id: str, job_index: int, turn: int, is_last: bool) -> dict:
    body = {
        "model": "tiny", "prompt": prompt, "max_tokens": 4, "min_tokens": 4, "ignore_eos": True, "temperature": 0,
        "vllm_xargs": {"job_id": job_id, "job_index": job_index, "turn": turn, "is_last_step": is_last},
    }
    request = urllib.request.Request(
        base_url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def _trace(replica: Replica) -> list[dict]:
    time.sleep(1.0)  # the trace is flushed when the engine goes idle
    with open(replica.info.trace_path) as trace:
        return [json.loads(line) for line in trace]


def _new_server_processes(before: set[int]) -> list:
    deadline = time.monotonic() + 15
    while (left := [p for p in replica_processes() if p[0] not in before]) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@pytest.fixture(scope="module")
def small_continuum_replica(tiny_model_dir, tmp_path_factory):
    """Continuum with a 40-block pool (1280 tokens) and a 60 s TTL: pins, not the TTL, decide what happens.
    A real engine: the pins live in vLLM's scheduler, and what they do to its pool and to its prefix-cache
    reset is the check. One server for both tests (the second resets first), forked from a launcher as a cell
    worker's are (three fresh interpreters would each import vLLM)."""
    work = tmp_path_factory.mktemp("replica")
    launcher_process, launcher = start_launcher(work / "launcher.sock", vllm_preload("cpu"),
                                                {**os.environ, **shared_environment()})  # fmt: skip
    base = VllmEngineConfig(
        model=str(tiny_model_dir), served_model_name="tiny", num_kv_blocks=40, max_model_len=1024, max_num_seqs=8
    )
    policy = get_policy("continuum")
    engine = policy.engine_config(base, dram_gb=0).model_copy(
        update={"extra_env": (("KVSWEEP_CONTINUUM", json.dumps({"ttl_s": 60.0})),)}
    )
    replica = Replica(engine, work, launcher=launcher)
    try:
        replica.start()
        yield replica
    finally:
        replica.stop()
        launcher_process.stdin.close()
        launcher_process.wait(timeout=30)


def test_pins_that_fill_the_pool_never_stop_the_engine(small_continuum_replica):
    url = small_continuum_replica.info.base_url
    word = " river" * 370  # 380 tokens with header and completion: 12 blocks
    # Three jobs each pin 12 blocks after turn 1: 36 of the 39 usable blocks are pinned.
    for index in range(3):
        _complete(url, f"[job{index}]" + word, f"job{index}", index, turn=1, is_last=False)
    steps = [e for e in _trace(small_continuum_replica) if e["kind"] == "step"]
    assert steps[-1]["pinned_blocks"] >= 36
    # The oldest job's next turn needs 12 more blocks than are free: it takes the youngest job's pin.
    answer = _complete(url, "[job0]" + word + " zephyr" * 350, "job0", 0, turn=2, is_last=True)
    assert answer["usage"]["completion_tokens"] == 4
    events = _trace(small_continuum_replica)
    pressure = [e for e in events if e["kind"] == "unpin" and e["reason"] == "pressure"]
    assert pressure and all(e["job_id"] != "job0" for e in pressure)
    assert pressure[0]["job_id"] == "job2"  # the youngest job gives way first


def test_prefix_cache_reset_succeeds_with_pins_held(small_continuum_replica):
    url = small_continuum_replica.info.base_url
    small_continuum_replica.reset()  # start from an empty pool whatever the test before left pinned
    _complete(url, "[reset-job]" + " cedar" * 200, "reset-job", 10, turn=1, is_last=False)
    assert [e for e in _trace(small_continuum_replica) if e["kind"] == "step"][-1]["pinned_blocks"] > 0
    small_continuum_replica.reset()
    events = _trace(small_continuum_replica)
    assert any(e["kind"] == "unpin" and e["reason"] == "reset" for e in events)
    again = _complete(url, "[reset-job]" + " cedar" * 200, "reset-job", 10, turn=2, is_last=True)
    assert again["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) == 0



def test_killing_a_worker_actor_mid_cell_leaves_no_vllm_process(ray_cluster):
    """A real server under a worker actor on the shared cluster: ``ray.kill`` of the actor must also end what
    vLLM forks (its retitled engine core), which the one-process fake engine does not have."""
    import ray

    before = {pid for pid, _ in replica_processes()}
    workload = WorkloadSpec(jps=1, duration_s=120, scale=0.25)
    spec = SweepSpec(name="kill", gpus=("cpu",), policies=("fcfs",), jps=(1,), workload=workload,
                     engine_options=EngineOptions(num_kv_blocks=600))  # fmt: skip
    (cell,) = expand(spec)
    (slot,) = read_inventory().slots("cpu", 0)
    worker = start_worker(slot)
    run = worker.run.remote(cell, RunLimits(health_timeout_s=300, client_actors=0))

    def ended() -> str | None:
        done, _ = ray.wait([run], timeout=0)
        return None if not done else "the cell ended first, {0.status.value}: {0.reason}".format(ray.get(done[0]))

    wait_for_serving_vllm(before, min_requests=2, ended=ended)
    ray.kill(worker)
    assert _new_server_processes(before) == []


def test_killing_the_driver_mid_cell_leaves_no_vllm_process(tmp_path):
    """``kvsweep cell`` as a driver of its own with a real server: SIGKILL of a driver whose server has forked its
    engine core must leave no server process behind."""
    before = {pid for pid, _ in replica_processes()}
    out = tmp_path / "cell"
    driver = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli.cell", "--jps", "1", "--duration-s", "120", "--no-checks", "--out",
         str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ}, start_new_session=True,
    )
    try:
        wait_for_serving_vllm(before, min_requests=2, ended=lambda: None if driver.poll() is None
                              else f"the driver exited first, with code {driver.returncode}")  # fmt: skip
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
        assert _new_server_processes(before) == []
        assert not (out / "requests.parquet").exists()  # an interrupted cell writes no records
    finally:
        if driver.poll() is None:
            driver.kill()
