"""The fake engine: an OpenAI-compatible server with no model behind it. Never a measurement.

It stands in for a GPU engine where none can run (this machine, CI) so that everything around the engine
(placement on Ray, replica reuse, the watchdog, tracking, resume) runs for real. It speaks the parts of
vLLM's HTTP surface the orchestrator uses: ``/v1/completions`` (streamed, or one JSON answer) with usage
shaped like vLLM's (prompt tokens counted as whitespace-separated words), ``/health``, ``/version``,
``/metrics`` (cache config and token counters) and ``POST /reset_prefix_cache``. With ``--prefix-cache`` it
keeps whole 16-word blocks under chained hashes, as vLLM keys KV blocks, and reports the hits as cached
tokens, so a reset can be checked; ``--reset-keeps-cache`` makes it answer a reset with success and keep
its cache, the way vLLM's LMCache connector keeps its CPU tier. Results produced with it are tagged
``engine=fake``.

It is also the yardstick for the load generator: every millisecond between a request's scheduled time
and its arrival here is the client's own lag. Per-token delay, failure injection, a stall (requests
accepted and never answered, like vLLM's CPU-offload hang) and a slow or hung start (a line of progress a second
before it listens, or silence for ever) make it useful for testing faults.

    python -m orchestrator.replica.fake_engine --port 8100 [--token-delay-s F] [--stall-after N]
        [--start-s F | --start-hangs]

``GET /arrivals`` returns every request's arrival time, job and turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from dataclasses import dataclass, field

from aiohttp import web

from orchestrator.paths import PROJECT_ROOT
from orchestrator.replica.config import FakeEngineConfig
from orchestrator.replica.server import ServerCommand

FAKE_VERSION = "fake-engine"


def fake_server_command(config: FakeEngineConfig, port: int, host: str = "127.0.0.1") -> ServerCommand:
    """The command that serves ``config`` on ``host:port`` (the fake engine writes no scheduler trace)."""
    argv = [sys.executable, "-m", "orchestrator.replica.fake_engine", "--host", host, "--port", str(port),
            "--token-delay-s", str(config.token_delay_s)]  # fmt: skip
    if config.stall_after is not None:
        argv += ["--stall-after", str(config.stall_after)]
    if config.start_s:
        argv += ["--start-s", str(config.start_s)]
    argv += ["--start-hangs"] * config.start_hangs
    argv += ["--prefix-cache"] * config.prefix_cache + ["--reset-keeps-cache"] * config.reset_keeps_cache
    return ServerCommand(argv=tuple(argv), env={"PYTHONPATH": str(PROJECT_ROOT)}, host=host, port=port)


@dataclass
class Arrival:
    at_unix: float
    job_id: str | None
    turn: int | None
    priority: int | None
    prompt_chars: int


FAKE_BLOCK_WORDS = 16


@dataclass
class FakePrefixCache:
    """Blocks of 16 words under chained hashes; never evicts. A hit is whole blocks and never the last word."""

    block_hashes: set[int] = field(default_factory=set)

    def cached_then_insert(self, words: list[str]) -> int:
        parent, num_hit, hitting = 0, 0, True
        for start in range(0, len(words) - FAKE_BLOCK_WORDS + 1, FAKE_BLOCK_WORDS):
            parent = hash((parent, tuple(words[start : start + FAKE_BLOCK_WORDS])))
            hitting = hitting and parent in self.block_hashes and start + FAKE_BLOCK_WORDS < len(words)
            num_hit += hitting
            self.block_hashes.add(parent)
        return num_hit * FAKE_BLOCK_WORDS


@dataclass
class FakeEngineState:
    token_delay_s: float = 0.0
    fail_status: int | None = None  # answer every request with this HTTP status instead
    stall_after: int | None = None  # requests after this many are accepted and never answered
    arrivals: list[Arrival] = field(default_factory=list)
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    running: int = 0
    cache: FakePrefixCache | None = None
    reset_keeps_cache: bool = False


def make_app(state: FakeEngineState) -> web.Application:
    async def completions(request: web.Request) -> web.StreamResponse:
        arrived = time.time()
        body = await request.json()
        xargs = body.get("vllm_xargs") or {}
        state.arrivals.append(
            Arrival(arrived, xargs.get("job_id"), xargs.get("turn"), body.get("priority"), len(body.get("prompt", "")))
        )
        if state.fail_status is not None:
            return web.json_response({"error": {"message": "injected failure"}}, status=state.fail_status)
        state.running += 1
        try:
            if state.stall_after is not None and len(state.arrivals) > state.stall_after:
                await asyncio.Event().wait()  # the injected hang: never answers
            return await _complete(request, body, state)
        finally:
            state.running -= 1

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="")

    async def version(_: web.Request) -> web.Response:
        return web.json_response({"version": FAKE_VERSION})

    async def metrics(_: web.Request) -> web.Response:
        lines = [
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="0",kv_cache_size_tokens="0"} 1.0',
            f"vllm:prompt_tokens_total {state.prompt_tokens_total}",
            f"vllm:generation_tokens_total {state.generation_tokens_total}",
            f"vllm:num_requests_running {state.running}",
            "vllm:num_requests_waiting 0",
            # A CPU tier that stores 1 KiB per prompt token and never reads anything back, so the tier
            # diagnosis downstream has counters to work on (a stand-in: there is no tier here).
            f"vllm:kv_offload_store_bytes_total {state.prompt_tokens_total * 1024}",
            "vllm:kv_offload_load_bytes_total 0",
            f"vllm:external_prefix_cache_queries_total {state.prompt_tokens_total}",
            "vllm:external_prefix_cache_hits_total 0",
        ]
        return web.Response(text="\n".join(lines) + "\n")

    async def reset_prefix_cache(_: web.Request) -> web.Response:
        if state.cache is not None and not state.reset_keeps_cache:
            state.cache.block_hashes.clear()
        return web.json_response({"success": True})

    async def arrivals(_: web.Request) -> web.Response:
        """Every request's arrival (Unix time, job, turn), for measuring a client's lag from this side."""
        return web.json_response([[a.at_unix, a.job_id, a.turn] for a in state.arrivals])

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
    app.router.add_get("/arrivals", arrivals)
    return app


async def _complete(request: web.Request, body: dict, state: FakeEngineState) -> web.StreamResponse:
    prompt = body.get("prompt", "")
    # Token ids (as vLLM's own benchmark client sends them) or text (words stand in for tokens).
    tokens = prompt if isinstance(prompt, list) else prompt.split()
    state.prompt_tokens_total += len(tokens)
    cached = state.cache.cached_then_insert([str(token) for token in tokens]) if state.cache is not None else 0
    num_tokens = int(body.get("max_tokens", 16))
    usage = {
        "prompt_tokens": len(tokens),
        "completion_tokens": num_tokens,
        "total_tokens": len(tokens) + num_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    if not body.get("stream"):
        state.generation_tokens_total += num_tokens
        text = "".join(f" t{i}" for i in range(num_tokens))
        return web.json_response({"choices": [{"index": 0, "text": text, "finish_reason": "length"}], "usage": usage})
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    chunks = [b"data: " + json.dumps({"choices": [{"index": 0, "text": f" t{i}", "finish_reason": None}]}).encode()
              + b"\n\n" for i in range(num_tokens)]  # fmt: skip
    if state.token_delay_s:
        for chunk in chunks:
            await asyncio.sleep(state.token_delay_s)
            state.generation_tokens_total += 1
            await response.write(chunk)
    else:  # one write: at thousands of requests per second the server must not be what is measured
        state.generation_tokens_total += num_tokens
        await response.write(b"".join(chunks))
    await response.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def _start(start_s: float, hangs: bool) -> None:
    """A slow start shows it is alive (a line a second, as vLLM logs its loading); a hung one shows nothing."""
    print("fake engine: loading", flush=True)
    if hangs:
        threading.Event().wait()
    loaded = time.monotonic() + start_s
    while (left := loaded - time.monotonic()) > 0:
        time.sleep(min(1.0, left))
        print(f"fake engine: loading, {max(0.0, loaded - time.monotonic()):.0f} s to go", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="Fake OpenAI-compatible engine (no model; for tests).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--token-delay-s", type=float, default=0.0)
    parser.add_argument("--stall-after", type=int, default=None)
    parser.add_argument("--prefix-cache", action="store_true")
    parser.add_argument("--reset-keeps-cache", action="store_true")
    parser.add_argument("--start-s", type=float, default=0.0, help="load for this long first, a line a second")
    parser.add_argument("--start-hangs", action="store_true", help="never listen, never print, use no CPU")
    args = parser.parse_args()
    _start(args.start_s, args.start_hangs)
    state = FakeEngineState(
        token_delay_s=args.token_delay_s,
        stall_after=args.stall_after,
        cache=FakePrefixCache() if args.prefix_cache else None,
        reset_keeps_cache=args.reset_keeps_cache,
    )
    try:  # uvloop (a vLLM dependency) handles the load benchmarks' thousands of requests per second faster
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    # On SIGTERM, open requests get a second to finish (aiohttp's default waits a minute for them): a stalled
    # request never finishes, and a replica's stop would otherwise wait out its whole grace before SIGKILL.
    web.run_app(make_app(state), host=args.host, port=args.port, print=None, shutdown_timeout=1.0)


if __name__ == "__main__":
    main()
