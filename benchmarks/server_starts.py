"""Where a CPU vLLM server start goes: the phases of each start of the tiny model's server, by launcher.

    python benchmarks/server_starts.py [--launcher process,forked] [--starts 3] [--check]

Each start runs the project's own command and environment (``vllm_server_command``) and is timed from launch to
each phase, stamped when the line that marks it reaches the server's log (the log is read every 20 ms):

    api_first      the API server's first line      "(APIServer pid=...)"
    engine_first   the engine core's first line     "(EngineCore pid=...)"
    weights        the weights are loaded           "Loading weights took"
    kv_cache       the KV pool is allocated         "KV cache size:"
    warm           profile, KV pool and warm-up     "init engine (profile, create kv cache, warmup model) took"
    listening      the HTTP server is up            "Starting vLLM server on"
    healthy        GET /health answers 200          (polled every 100 ms)

``process`` starts the command as ``replica.server`` does (a new session of a fresh interpreter); ``forked`` asks a
launcher (``replica.launcher``), started once beforehand with vLLM preloaded, to fork it, with the engine core (which
runs the one rank) forked too (``VLLM_WORKER_MULTIPROC_METHOD=fork``); the launcher's own start is reported apart. Each
server is started and stopped by ``replica.server`` (SIGTERM to its process group, SIGKILL after a grace period).
With ``--check`` each start must also come up with an empty prefix cache (``/metrics`` prefix-cache queries and
hits at 0) and give every start the same texts and token counts for a few greedy completions. Prints a table of
medians per launcher and phase, then one JSON line. The CPU engine's speed is the machine's: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from orchestrator.models.tiny import ensure_tiny_model
from orchestrator.replica.config import VllmEngineConfig
from orchestrator.replica.launcher import start_launcher, vllm_preload
from orchestrator.replica.probe import counter_totals
from orchestrator.replica.server import ServerProcess, free_port
from orchestrator.replica.vllm_server import shared_environment, vllm_server_command
from orchestrator.workload.text import WORD_POOL

PHASES = {  # phase: a text that the first log line of the phase contains
    "api_first": "(APIServer pid=",
    "engine_first": "(EngineCore pid=",
    "weights": "Loading weights took",
    "kv_cache": "KV cache size:",
    "warm": "init engine (profile, create kv cache, warmup model) took",
    "listening": "Starting vLLM server on",
}
ALL_PHASES = (*PHASES, "healthy")
PREFIX_CACHE_COUNTERS = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")
NUM_CHECK_PROMPTS = 4


def engine_config() -> VllmEngineConfig:
    return VllmEngineConfig(model=str(ensure_tiny_model()), served_model_name="tiny", num_kv_blocks=600)


def time_start(server: ServerProcess, timeout_s: float = 300.0) -> dict[str, float]:
    """Launches ``server`` and stamps each phase in seconds from launch."""
    log_path, started_at = server.log_path, time.monotonic()
    server.launch()
    phases: dict[str, float] = {}
    offset, pending = 0, b""
    while "healthy" not in phases:
        with open(log_path, "rb") as log:
            log.seek(offset)
            pending += log.read()
            offset = log.tell()
        now = time.monotonic() - started_at
        if not server.is_running() or now > timeout_s:
            server.stop()
            raise RuntimeError(f"server exited ({server.exit_code}) or not healthy in {timeout_s:g} s; see {log_path}")
        *lines, pending = pending.split(b"\n")
        for line in lines:
            for phase, marker in PHASES.items():
                if phase not in phases and marker.encode() in line:
                    phases[phase] = now
        if "listening" in phases and _healthy(server.command.base_url):
            phases["healthy"] = time.monotonic() - started_at
        time.sleep(0.02 if "listening" not in phases else 0.1)
    return phases


def _healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url + "/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def check_answers(base_url: str) -> dict:
    """The prefix-cache counters at start (must be 0) and the greedy answers to a few fixed prompts."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as response:
        totals = counter_totals(response.read().decode())
    answers = []
    for index in range(NUM_CHECK_PROMPTS):
        prompt = " ".join(WORD_POOL[(index * 7 + k) % len(WORD_POOL)] for k in range(40 + 20 * index))
        body = {"model": "tiny", "prompt": prompt, "max_tokens": 16, "temperature": 0}
        request = urllib.request.Request(base_url + "/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.loads(response.read())
        usage = answer["usage"]
        answers.append([answer["choices"][0]["text"], usage["prompt_tokens"], usage["completion_tokens"]])
    return {"prefix_cache_at_start": {name: totals.get(name) for name in PREFIX_CACHE_COUNTERS}, "answers": answers}


def run_launcher(kind: str, num_starts: int, check: bool, work_dir: Path) -> dict:
    """``num_starts`` timed starts with one launcher kind; the forked kind's launcher start is timed apart."""
    config, launcher_process, client = engine_config(), None, None
    result = {"starts": [], "checks": []}
    if kind == "forked":
        started_at = time.monotonic()
        # Started with what every server's environment shares: some modules read it when imported.
        shared_env = {**os.environ, **shared_environment()}
        launcher_process, client = start_launcher(work_dir / "launcher.sock", vllm_preload("cpu"), shared_env)
        result["launcher_start_s"] = round(time.monotonic() - started_at, 2)
    try:
        for index in range(num_starts):
            command = vllm_server_command(config, port=free_port())
            if client is not None:
                command = command.forked()
            log_path = work_dir / f"{kind}-{index}.log"
            log_path.touch()
            server = ServerProcess(command, log_path, client)
            phases = time_start(server)
            try:
                if check:
                    result["checks"].append(check_answers(command.base_url))
            finally:
                server.stop()
            result["starts"].append({phase: round(phases.get(phase, float("nan")), 2) for phase in ALL_PHASES})
            print(f"{kind} start {index}: {result['starts'][-1]}", file=sys.stderr, flush=True)
    finally:
        if launcher_process is not None:
            launcher_process.stdin.close()
            launcher_process.wait(timeout=30)
    return result


def summarize(results: dict[str, dict]) -> dict:
    """Medians per launcher and phase, and whether every check held (empty cache at start, equal answers)."""
    medians = {kind: {phase: statistics.median(start[phase] for start in result["starts"]) for phase in ALL_PHASES}
               for kind, result in results.items()}  # fmt: skip
    checks = [check for result in results.values() for check in result["checks"]]
    summary = {"medians": medians, "starts": {kind: result["starts"] for kind, result in results.items()},
               "launcher_start_s": results.get("forked", {}).get("launcher_start_s")}  # fmt: skip
    if checks:
        summary["cache_empty_at_start"] = all(not any(c["prefix_cache_at_start"].values()) for c in checks)
        summary["answers_equal"] = all(c["answers"] == checks[0]["answers"] for c in checks)
        summary["answers"] = checks[0]["answers"]
    return summary


def print_table(summary: dict) -> None:
    kinds = list(summary["medians"])
    counts = ", ".join(f"{kind}: {len(summary['starts'][kind])} starts" for kind in kinds)
    print(f"\nMedian seconds from launch ({counts})")
    print(f"{'phase':<14}" + "".join(f"{kind:>10}" for kind in kinds))
    for phase in ALL_PHASES:
        print(f"{phase:<14}" + "".join(f"{summary['medians'][kind][phase]:>10.2f}" for kind in kinds))
    if summary["launcher_start_s"] is not None:
        print(f"the launcher's own start (once per node): {summary['launcher_start_s']:.2f} s")
    if "answers_equal" in summary:
        print(f"prefix cache empty at every start: {summary['cache_empty_at_start']}; "
              f"same answers at every start: {summary['answers_equal']}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--launcher", default="process,forked", help="comma-separated: process, forked")
    parser.add_argument("--starts", type=int, default=3, help="timed starts per launcher")
    parser.add_argument("--check", action="store_true", help="check empty prefix cache and equal answers per start")
    args = parser.parse_args(argv)
    kinds = args.launcher.split(",")
    if bad := set(kinds) - {"process", "forked"}:
        parser.error(f"unknown launcher {sorted(bad)}: valid: process, forked")
    work_dir = Path(tempfile.mkdtemp(prefix="kvsweep-starts-"))
    print(f"server logs in {work_dir}", file=sys.stderr)
    results = {kind: run_launcher(kind, args.starts, args.check, work_dir) for kind in kinds}
    summary = summarize(results)
    print_table(summary)
    print(json.dumps(summary))
    return 0 if summary.get("cache_empty_at_start", True) and summary.get("answers_equal", True) else 1


if __name__ == "__main__":
    sys.exit(main())
