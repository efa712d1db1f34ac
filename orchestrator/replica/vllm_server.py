"""The vLLM OpenAI server command line for one replica, from a typed engine configuration."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from orchestrator.paths import PROJECT_ROOT
from orchestrator.replica.config import VllmEngineConfig
from orchestrator.replica.server import ServerCommand
from orchestrator.units import GIB

# Read by orchestrator.replica.schedulers.tracing inside the engine process (not imported here: that
# module needs vLLM, and building a command line must not).
TRACE_ENV = "KVSWEEP_SCHEDULER_TRACE"

# How long the server keeps an idle HTTP connection open (vLLM's default is 5 s, shorter than a tool-call
# gap). Longer than the load generator's idle limit (``workload.client.IDLE_CONNECTION_S``) so that the
# client, never the server, closes an idle connection.
HTTP_KEEP_ALIVE_S = 120

# vLLM's own logging configuration with one logger let through at DEBUG: the SimpleCPUOffloadConnector's
# manager, whose "Store event N completed: cached M blocks to CPU" lines are its only record of its stores
# (vLLM 0.26 exports no counter for it). Everything else logs as vLLM's default would.
CONNECTOR_DEBUG_LOGGING = Path(__file__).with_name("vllm_logging.json")


# The CPU engine's one rank in the engine core process (vLLM's uniprocess executor, its default for one GPU), not in a
# worker process of its own: vLLM's CPU platform picks the multiprocess executor unless V1 multiprocessing is off, and
# there the engine core and the worker each spin for a second after every message they read, so a serving replica
# keeps two cores busy whatever its load (one cell: 1.63 times the server's CPU and 1.21 times the mean JCT,
# docs/measured.md). The API server still runs the engine core in a process of its own.
CPU_IN_PROCESS_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def vllm_server_command(
    config: VllmEngineConfig, port: int, host: str = "127.0.0.1", trace_path: Path | None = None
) -> ServerCommand:
    """The command that serves ``config`` on ``host:port``; ``trace_path`` receives the scheduler trace."""
    argv = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", config.model,
        "--served-model-name", config.served_model_name,
        "--host", host,
        "--port", str(port),
        "--block-size", str(config.block_size),
        "--max-model-len", str(config.max_model_len),
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--scheduling-policy", config.scheduling_policy,
        "--disable-uvicorn-access-log",
    ]  # fmt: skip
    if config.load_format != "auto":
        argv += ["--load-format", config.load_format]
    if config.num_kv_blocks is not None:
        argv += ["--num-gpu-blocks-override", str(config.num_kv_blocks)]
    if config.device == "gpu":
        argv += ["--gpu-memory-utilization", str(config.gpu_memory_utilization)]
    else:
        # Without an explicit size the CPU engine claims 0.92 of the node's memory and refuses to start
        # when anything else uses some. With a fixed block count the pool is that count times the block size.
        kv_gib = config.kv_cache_gib if config.kv_cache_gib is not None else 1.0
        argv += ["--kv-cache-memory-bytes", str(int(kv_gib * GIB))]
    for flag, value in (
        ("--max-num-seqs", config.max_num_seqs),
        ("--max-num-batched-tokens", config.max_num_batched_tokens),
        ("--scheduler-cls", config.scheduler_cls),
    ):
        if value is not None:
            argv += [flag, str(value)]
    if config.enforce_eager:
        argv.append("--enforce-eager")
    if config.tensor_parallel_size > 1:
        # Processes on this node, on the GPUs Ray gave the worker (CUDA_VISIBLE_DEVICES): vLLM would pick its Ray
        # executor where it finds Ray, and place the ranks itself.
        argv += ["--tensor-parallel-size", str(config.tensor_parallel_size), "--distributed-executor-backend", "mp"]
    elif config.device == "cpu":
        # One rank runs inside the engine core, as vLLM runs it on a GPU (see ``_environment``).
        argv += ["--distributed-executor-backend", "uni"]
    argv += config.extra_args
    return ServerCommand(argv=tuple(argv), env=_environment(config, trace_path), host=host, port=port)


def rank_cores(cores: list[int], tp: int) -> str:
    """vLLM's CPU binding of ``tp`` ranks to ``cores`` in equal runs, ``"0-3|4-7"``: its automatic binding gives each
    rank a NUMA node and refuses more ranks than nodes (one here), so the ranks share this node's cores."""
    if len(cores) < tp:
        raise ValueError(f"the CPU engine's --tp {tp} needs a core per rank; this node allows {len(cores)}: "
                         f"valid: --tp up to {len(cores)}")  # fmt: skip
    share = len(cores) // tp
    runs = [cores[rank * share:(rank + 1) * share] for rank in range(tp)]
    return "|".join(",".join(map(str, run)) for run in runs)


def shared_environment() -> dict[str, str]:
    """What every server's environment holds, whatever its configuration: what a launcher that forks them must be
    started with (a module may read it at import, as huggingface_hub reads ``HF_HUB_OFFLINE``)."""
    return {
        "PYTHONPATH": str(PROJECT_ROOT),
        # Enables POST /reset_prefix_cache, which replicas use between cells.
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(HTTP_KEEP_ALIVE_S),
    }


def _environment(config: VllmEngineConfig, trace_path: Path | None) -> dict[str, str]:
    env = shared_environment()
    if trace_path is not None:
        env[TRACE_ENV] = str(trace_path)
    if config.connector_debug_log:
        env["VLLM_LOGGING_CONFIG_PATH"] = str(CONNECTOR_DEBUG_LOGGING)
    if config.device == "cpu" and config.tensor_parallel_size > 1:
        env["VLLM_CPU_OMP_THREADS_BIND"] = rank_cores(sorted(os.sched_getaffinity(0)), config.tensor_parallel_size)
    elif config.device == "cpu":
        env.update(CPU_IN_PROCESS_ENV)
    env.update(dict(config.extra_env))
    return env

