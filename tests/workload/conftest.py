from __future__ import annotations

import asyncio
import threading

import pytest
from aiohttp import web

from orchestrator.replica.fake_engine import FakeEngineState, make_app
from orchestrator.replica.server import free_port


class RunningInstantServer:
    def __init__(self, state: FakeEngineState, url: str):
        self.state = state
        self.url = url


@pytest.fixture
def instant_server():
    """The project's fake engine (an OpenAI-compatible server with no model) on a loopback port, in a background thread:
    real HTTP, with the arrivals it recorded and a token delay and failure status a test sets, and no model to load."""
    state = FakeEngineState()
    port = free_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(make_app(state))
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield RunningInstantServer(state, f"http://127.0.0.1:{port}")
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
