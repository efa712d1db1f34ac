"""The load generator's HTTP connections against a uvicorn server (what vLLM serves with), over loopback."""

from __future__ import annotations

import asyncio
import threading
import time

import aiohttp
import pytest
import uvicorn

from orchestrator.replica.config import VllmEngineConfig
from orchestrator.replica.server import free_port
from orchestrator.replica.vllm_server import vllm_server_command
from orchestrator.workload.client import IDLE_CONNECTION_S, open_session

SERVER_KEEP_ALIVE_S = 1


async def _ok(scope, receive, send):
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(scope="module")
def keep_alive_server():
    port = free_port()
    config = uvicorn.Config(_ok, host="127.0.0.1", port=port, timeout_keep_alive=SERVER_KEEP_ALIVE_S,
                            log_level="warning", lifespan="off")  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}/"
    server.should_exit = True
    thread.join(timeout=5)


def _second_request_after_a_busy_loop(url: str, session_factory) -> str:
    """Send a request, keep the event loop busy past the server's keep-alive, send another."""

    async def run() -> str:
        async with session_factory() as session:
            async with session.post(url, data=b"x" * 1000) as response:
                await response.read()
            time.sleep(SERVER_KEEP_ALIVE_S + 1.5)  # the loop cannot see the server close the connection
            try:
                async with session.post(url, data=b"x" * 1000) as response:
                    return (await response.read()).decode()
            except aiohttp.ClientError as error:
                return type(error).__name__

    return asyncio.run(run())


def test_a_connection_the_server_closed_while_the_client_was_busy_is_not_reused(keep_alive_server):
    # aiohttp's default keeps idle connections 15 s: longer than this server's keep-alive, so it reuses
    # the connection the server has closed.
    assert _second_request_after_a_busy_loop(keep_alive_server, aiohttp.ClientSession) == "ServerDisconnectedError"
    shorter = lambda: open_session(idle_connection_s=SERVER_KEEP_ALIVE_S / 2)  # noqa: E731
    assert _second_request_after_a_busy_loop(keep_alive_server, shorter) == "ok"


def test_replicas_keep_idle_connections_longer_than_the_load_generator_does():
    command = vllm_server_command(VllmEngineConfig(model="m"), port=8000)
    assert float(command.env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]) > IDLE_CONNECTION_S
