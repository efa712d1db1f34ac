"""An OpenAI-compatible ``/v1/completions`` server that answers at once and records each arrival.

It is the yardstick for the load generator itself: with no model behind it, every millisecond between a
request's scheduled time and its arrival here is the client's own lag. It streams ``max_tokens`` chunks
and a usage chunk shaped like vLLM's (prompt tokens counted as whitespace-separated words, no cache).
Optional per-token delay and failure injection make it useful for testing timeouts and error handling.

    python -m orchestrator.workload.instant_server --port 8100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Arrival:
    at_unix: float
    job_id: str | None
    turn: int | None
    priority: int | None
    prompt_chars: int


@dataclass
class InstantServerState:
    token_delay_s: float = 0.0
    fail_status: int | None = None  # answer every request with this HTTP status instead
    arrivals: list[Arrival] = field(default_factory=list)


def make_app(state: InstantServerState) -> web.Application:
    async def completions(request: web.Request) -> web.StreamResponse:
        arrived = time.time()
        body = await request.json()
        xargs = body.get("vllm_xargs") or {}
        state.arrivals.append(
            Arrival(arrived, xargs.get("job_id"), xargs.get("turn"), body.get("priority"), len(body.get("prompt", "")))
        )
        if state.fail_status is not None:
            return web.json_response({"error": {"message": "injected failure"}}, status=state.fail_status)
        return await _stream(request, body, state.token_delay_s)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/health", health)
    return app


async def _stream(request: web.Request, body: dict, token_delay_s: float) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    num_tokens = int(body.get("max_tokens", 16))
    for index in range(num_tokens):
        if token_delay_s:
            await asyncio.sleep(token_delay_s)
        chunk = {"choices": [{"index": 0, "text": f" t{index}", "finish_reason": None}]}
        await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    prompt_tokens = len(body.get("prompt", "").split())
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": num_tokens,
        "total_tokens": prompt_tokens + num_tokens,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    await response.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def main() -> None:
    parser = argparse.ArgumentParser(description="Instant OpenAI-compatible completion server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--token-delay-s", type=float, default=0.0)
    args = parser.parse_args()
    web.run_app(make_app(InstantServerState(token_delay_s=args.token_delay_s)), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
