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
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class EngineFacts:
    vllm_version: str | None
    block_size: int | None
    num_kv_blocks: int | None  # includes vLLM's reserved null block
    kv_cache_tokens: int | None
    device_name: str

    def as_dict(self) -> dict:
        return asdict(self)


_LABEL = re.compile(r'(\w+)="([^"]*)"')


def parse_cache_config(metrics_text: str) -> dict[str, str]:
    """Labels of the ``vllm:cache_config_info`` gauge in a Prometheus exposition."""
    for line in metrics_text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            return dict(_LABEL.findall(line))
    return {}


# Counters that grow with every step that does work; a replica whose counters stand still while
# requests are in flight is making no progress.
_WORK_COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")


def work_counter(metrics_text: str) -> float:
    """Sum of the token counters in a Prometheus exposition (over all label sets)."""
    total = 0.0
    for line in metrics_text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in _WORK_COUNTERS:
            total += float(line.rsplit(" ", 1)[1])
    return total


def read_work_counter(base_url: str, timeout_s: float = 5.0) -> float | None:
    """The replica's work counter, or None if ``/metrics`` does not answer in time."""
    try:
        return work_counter(_get(base_url + "/metrics", timeout_s))
    except (OSError, ValueError):
        return None


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


def _get(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read().decode()


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "None") else None
    except ValueError:
        return None
