"""One streamed ``/v1/completions`` call against any OpenAI-compatible server.

The request carries the job identity to the server's scheduler through ``vllm_xargs`` (it arrives as
``sampling_params.extra_args``; JSON ``true`` arrives as ``1``), and, for program-level FCFS, the job's
arrival index as ``priority``. Streaming gives the first-token time; the final usage chunk gives the
server's prompt and cached token counts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from orchestrator.records.cell import RequestOptions
from orchestrator.records.schema import REPLICA_HEADER

# A pooled connection is dropped after this long idle. It must be shorter than the server's keep-alive
# (replicas start vLLM with a longer one, ``replica.vllm_server.HTTP_KEEP_ALIVE_S``): a client whose loop
# is busy when the server closes an idle connection would otherwise write its next request onto the
# closing socket and record "Server disconnected" against a healthy server.
IDLE_CONNECTION_S = 30.0


def open_session(idle_connection_s: float = IDLE_CONNECTION_S) -> aiohttp.ClientSession:
    """The HTTP session load generators use: unlimited connections, no overall timeout (each request has
    its own), and idle connections dropped after ``idle_connection_s``."""
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=idle_connection_s)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None, sock_connect=30))


class EpochClock:
    """Seconds since a shared Unix epoch, read from the monotonic clock so it never jumps.

    Every client actor of a cell builds one from the same epoch, so their records share a time axis.
    """

    def __init__(self, epoch_unix: float):
        self._monotonic_at_epoch = time.monotonic() - (time.time() - epoch_unix)

    def now(self) -> float:
        return time.monotonic() - self._monotonic_at_epoch


@dataclass(frozen=True)
class Completion:
    text: str
    first_token_at: float | None
    finished_at: float
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    replica: int = 0  # the replica that served it, where a router names one (``REPLICA_HEADER``)


class CompletionError(RuntimeError):
    """The server answered, but not with a usable completion (``replica``: the one that answered)."""

    def __init__(self, message: str, replica: int = 0):
        super().__init__(message)
        self.replica = replica


class CompletionClient:
    def __init__(self, base_url: str, options: RequestOptions, session: aiohttp.ClientSession, now: Callable[[], float]):
        self._url = base_url.rstrip("/") + "/v1/completions"
        self._options = options
        self._session = session
        self._now = now

    def body(self, prompt: str, output_tokens: int, job_id: str, job_index: int, turn: int, is_last: bool) -> dict:
        options = self._options
        body = {
            "model": options.model,
            "prompt": prompt,
            "max_tokens": output_tokens,
            "min_tokens": output_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "vllm_xargs": {"job_id": job_id, "job_index": job_index, "turn": turn, "is_last_step": is_last},
        }
        if options.send_priority:
            body["priority"] = job_index
        if options.answer_token_ids is not None:
            body["allowed_token_ids"] = list(options.answer_token_ids)
        return body

    async def complete(self, body: dict) -> Completion:
        """Send ``body`` and read the stream to its end. Raises ``CompletionError`` or aiohttp errors."""
        first_token_at = None
        pieces: list[str] = []
        usage = None
        async with self._session.post(self._url, json=body) as response:
            replica = int(response.headers.get(REPLICA_HEADER, 0))
            if response.status != 200:
                detail = (await response.text())[:300]
                raise CompletionError(f"HTTP {response.status}: {detail}", replica)
            try:
                async for raw_line in response.content:
                    if not raw_line.startswith(b"data: "):
                        continue
                    payload = raw_line[6:].strip()
                    if payload == b"[DONE]":
                        break
                    chunk = json.loads(payload)
                    for choice in chunk.get("choices", ()):
                        if choice.get("text"):
                            if first_token_at is None:
                                first_token_at = self._now()
                            pieces.append(choice["text"])
                    usage = chunk.get("usage") or usage
            except aiohttp.ClientError as failure:  # the stream broke: say which replica lost the request
                raise CompletionError(f"{type(failure).__name__}: {failure}", replica) from failure
        finished_at = self._now()
        if usage is None:
            raise CompletionError("stream ended without a usage chunk", replica)
        details = usage.get("prompt_tokens_details") or {}
        return Completion(
            text="".join(pieces),
            first_token_at=first_token_at,
            finished_at=finished_at,
            prompt_tokens=usage.get("prompt_tokens"),
            cached_tokens=details.get("cached_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            replica=replica,
        )
