"""What a running replica reports about itself: the configuration that actually took effect.

A cell records both what it asked for (the engine config) and what the server says it got, because
vLLM silently adjusts settings (block size per backend, KV pool from memory).
"""

from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
import urllib.request
import uuid

from orchestrator.records.cell import EngineFacts, TierCounters
from orchestrator.workload.text import WORD_POOL

_LABEL = re.compile(r'(\w+)="([^"]*)"')


def parse_cache_config(metrics_text: str) -> dict[str, str]:
    """Labels of the ``vllm:cache_config_info`` gauge in a Prometheus exposition."""
    for line in metrics_text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            return dict(_LABEL.findall(line))
    return {}


# Counters that grow with every step that does work; a replica whose counters stand still while
# requests are in flight is making no progress.
WORK_COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")
EXTERNAL_HITS = TierCounters.metric("external_prefix_cache_hits")  # prompt tokens a KV connector's tier served
RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"  # gauges: requests in the engine now
PREEMPTIONS = "vllm:num_preemptions_total"  # running requests preempted (recomputed later) for want of blocks


def counter_totals(metrics_text: str) -> dict[str, float]:
    """Each metric's value in a Prometheus exposition, summed over its label sets."""
    totals: dict[str, float] = {}
    for line in metrics_text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        try:
            totals[name] = totals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
    return totals


def read_counters(base_url: str, timeout_s: float = 5.0) -> dict[str, float] | None:
    """The replica's counters, or None if ``/metrics`` does not answer in time."""
    try:
        return counter_totals(_get(base_url + "/metrics", timeout_s))
    except (OSError, ValueError):
        return None


def work_done(counters: dict[str, float] | None) -> float | None:
    return sum(counters.get(name, 0.0) for name in WORK_COUNTERS) if counters is not None else None


def read_engine_facts(base_url: str, timeout_s: float = 10.0) -> EngineFacts:
    cache = parse_cache_config(_get(base_url + "/metrics", timeout_s))
    version = json.loads(_get(base_url + "/version", timeout_s)).get("version")
    return EngineFacts(
        vllm_version=version,
        block_size=_int_or_none(cache.get("block_size")),
        num_kv_blocks=_int_or_none(cache.get("num_gpu_blocks")),
        kv_cache_tokens=_int_or_none(cache.get("kv_cache_size_tokens")),
        device_name=device_name(),
    )


def device_name() -> str:
    """The first GPU's name from nvidia-smi, else the CPU model."""
    if shutil.which("nvidia-smi"):
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
        if result.returncode == 0 and result.stdout.strip():
            return result.stdout.strip().splitlines()[0]
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# Long enough to fill whole blocks of every engine and one LMCache chunk (256 tokens), short enough to fit
# beside pinned blocks in the smallest pool a test runs.
CANARY_WORDS = 300


def canary_prompt() -> str:
    """A prompt no workload sends and no earlier canary shares a block with: a unique header, then pool
    words (one token each on the tiny model's tokenizer, about one on a real one)."""
    words = " ".join(WORD_POOL[i % len(WORD_POOL)] for i in range(CANARY_WORDS))
    return f"canary {uuid.uuid4().hex[:12]}: {words}"


def cached_tokens_of(base_url: str, model: str, prompt: str, timeout_s: float = 120.0) -> int:
    """Sends ``prompt`` for one token; the prompt tokens the engine served from a cache (any tier)."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    request = urllib.request.Request(base_url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        usage = json.loads(response.read()).get("usage") or {}
    return int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)


def _get(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read().decode()


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "None") else None
    except ValueError:
        return None
