from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.mechanisms.continuum.config import CONFIG_ENV
from orchestrator.policies.catalog import POLICIES, PolicyError, cpu_policy_names, get_policy
from orchestrator.replica.config import VllmEngineConfig
from orchestrator.replica.vllm_server import vllm_server_command

GPU = VllmEngineConfig(model="meta-llama/Llama-3.1-8B-Instruct", device="gpu", block_size=16)
CPU = VllmEngineConfig(model="/models/tiny", device="cpu")


def _vllm_parse(argv: tuple[str, ...]):
    """Parse a server command line with vLLM's own OpenAI-server argument parser."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    module_index = argv.index("vllm.entrypoints.openai.api_server")
    return make_arg_parser(FlexibleArgumentParser()).parse_args(list(argv[module_index + 1 :]))


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_gpu_command_line_is_accepted_by_vllms_own_parser(name):
    engine = get_policy(name).engine_config(GPU, dram_gb=400)
    args = _vllm_parse(vllm_server_command(engine, port=8000).argv)
    assert args.scheduler_cls == engine.scheduler_cls
    assert args.enable_prefix_caching is True


def test_lmcache_gets_its_connector_and_the_dram_budget_as_cpu_tier():
    engine = get_policy("lmcache").engine_config(GPU, dram_gb=400)
    command = vllm_server_command(engine, port=8000)
    args = _vllm_parse(command.argv)
    assert args.kv_transfer_config.kv_connector == "LMCacheConnectorV1"
    assert args.kv_transfer_config.kv_role == "kv_both"
    assert command.env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "400" and command.env["LMCACHE_LOCAL_CPU"] == "True"
    nocache = vllm_server_command(get_policy("lmcache-nocache").engine_config(GPU, dram_gb=400), port=8000)
    assert nocache.env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "1"


@pytest.mark.parametrize("name, simple", [("native-offload", False), ("simple-offload", True)])
def test_native_offload_sizes_the_cpu_tier_from_the_dram_budget(name, simple):
    command = vllm_server_command(get_policy(name).engine_config(GPU, dram_gb=64), port=8000)
    args = _vllm_parse(command.argv)
    assert args.kv_offloading_size == 64 and args.kv_offloading_backend == "native"
    assert (command.env.get("VLLM_USE_SIMPLE_KV_OFFLOAD") == "1") is simple
    # The simple connector's stores are only in its manager's debug lines, so its server lets those through.
    logging_config = command.env.get("VLLM_LOGGING_CONFIG_PATH")
    assert (logging_config is not None) is simple
    if simple:
        loggers = json.loads(Path(logging_config).read_text())["loggers"]
        assert loggers["vllm.v1.simple_kv_offload.manager"]["level"] == "DEBUG" and loggers["vllm"]["level"] == "INFO"


@pytest.mark.parametrize("name", ["lmcache", "lmcache-nocache", "native-offload", "simple-offload"])
def test_cuda_only_policies_are_refused_on_the_cpu_engine_with_one_line(name):
    with pytest.raises(PolicyError) as refused:
        get_policy(name).engine_config(CPU, dram_gb=8)
    message = str(refused.value)
    assert "\n" not in message and name in message and "fcfs" in message and "continuum" in message


def test_unknown_policy_names_the_known_ones():
    with pytest.raises(PolicyError, match="unknown policy 'lru'.*fcfs.*continuum"):
        get_policy("lru")


def test_ordering_and_pinning_are_separate_axes():
    def shape(name):
        engine = get_policy(name).engine_config(CPU, dram_gb=0)
        sends_priority = get_policy(name).ordering.sends_priority
        return engine.scheduling_policy, engine.scheduler_cls.rsplit(".", 1)[1], sends_priority

    assert shape("fcfs") == ("fcfs", "TracingScheduler", False)
    assert shape("job-fcfs") == ("priority", "TracingScheduler", True)
    assert shape("continuum-pin-only") == ("fcfs", "ContinuumScheduler", False)
    assert shape("continuum") == ("priority", "ContinuumScheduler", True)
    assert set(cpu_policy_names()) >= {"fcfs", "job-fcfs", "continuum", "continuum-pin-only"}


def test_gpu_engines_keep_async_scheduling_under_our_schedulers():
    assert get_policy("fcfs").engine_config(GPU, 0).scheduler_cls.endswith("AsyncTracingScheduler")
    assert get_policy("continuum").engine_config(GPU, 0).scheduler_cls.endswith("AsyncContinuumScheduler")
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    from orchestrator.replica.schedulers.async_variants import AsyncContinuumScheduler

    assert issubclass(AsyncContinuumScheduler, AsyncScheduler)


def test_continuum_settings_reach_the_engine_process_environment():
    env = dict(get_policy("continuum-adaptive").engine_config(CPU, 0).extra_env)
    assert json.loads(env[CONFIG_ENV])["ttl_mode"] == "adaptive"


def test_the_cpu_engine_runs_one_rank_in_its_engine_core_and_tensor_parallel_ranks_in_worker_processes():
    """vLLM's CPU platform takes the multiprocess executor while V1 multiprocessing is on, whatever the command line
    says; the command turns it off for one rank, as one GPU runs by default."""
    one = vllm_server_command(CPU, port=8000)
    assert _vllm_parse(one.argv).distributed_executor_backend == "uni"
    assert one.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    two = vllm_server_command(CPU.model_copy(update={"tensor_parallel_size": 2}), port=8000)
    assert _vllm_parse(two.argv).distributed_executor_backend == "mp"
    gpu = vllm_server_command(GPU, port=8000)
    assert _vllm_parse(gpu.argv).distributed_executor_backend is None
    assert all("VLLM_ENABLE_V1_MULTIPROCESSING" not in command.env for command in (two, gpu))
