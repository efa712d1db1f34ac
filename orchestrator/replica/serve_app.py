"""A cell's replicas as a Ray Serve application: an ingress that takes the load generator's ``/v1/completions``
requests, and N engine replicas behind the rules' request router (``serve_router``).

Each engine replica is a Serve replica that starts one engine server (``Replica``: vLLM or the fake engine) on the
resources Serve gave it (a GPU of the cell's type, or the CPU engine's place) and streams completions through from
it. The ingress forwards the request body to the engine deployment (the router reads it there) and returns the
stream with the serving replica's rank in the ``REPLICA_HEADER`` response header, which the client records. Nothing
batches or buffers the stream: chunks pass through as the engine writes them.

The cell's coordinator reaches one replica by naming its rank (``TO_REPLICA``) for what it needs besides the load:
the engine facts, liveness and counters while the cell runs, the server log and scheduler trace afterwards.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator

import aiohttp
from ray import serve
from ray.serve.config import RequestRouterConfig
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import StreamingResponse

from orchestrator.records.schema import REPLICA_HEADER
from orchestrator.replica.config import EngineConfig
from orchestrator.replica.priority import at_normal_priority
from orchestrator.replica.probe import read_counters
from orchestrator.replica.replica import OutputMark, Replica, ReplicaInfo
from orchestrator.replica.serve_router import RANK, RulesRequestRouter
from orchestrator.replica.server import StartLimits

# Serve refuses a request a replica has this many of in flight; far above any cell's load, so that the rules alone
# decide where a request goes (a refusal would send it to whichever replica Serve tries next).
MAX_ONGOING_REQUESTS = 100_000
# A cell's application is deleted once its load has ended, with nothing in flight to drain: no grace to wait out.
SHUTDOWN_OPTIONS = {"graceful_shutdown_timeout_s": 1.0, "graceful_shutdown_wait_loop_s": 0.2}
ENGINE_DEPLOYMENT = "engine"


class EngineReplica:
    """One engine server, started in this Serve replica; its completions streamed through."""

    def __init__(self, engine: EngineConfig, start_limits: StartLimits):
        context = serve.get_replica_context()
        self.rank = int(getattr(context.rank, "rank", context.rank))
        self._replica = Replica(engine, tempfile.mkdtemp(prefix=f"kvsweep-serve-{self.rank}-"), start_limits)
        self._info = self._replica.start()
        self._replica_tag = context.replica_tag
        self._session: aiohttp.ClientSession | None = None

    def record_replica_metadata(self) -> dict:
        return {RANK: self.rank}

    async def complete(self, body: dict) -> AsyncIterator[object]:
        """First the rank and the engine's HTTP status, then the engine's response bytes as they come."""
        if self._session is None:  # made on the replica's event loop, where it is used
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                                  timeout=aiohttp.ClientTimeout(total=None))  # fmt: skip
        async with self._session.post(self._info.base_url + "/v1/completions", json=body) as response:
            yield self.rank, response.status
            async for chunk in response.content.iter_any():
                yield chunk

    def check_health(self) -> None:
        if not self._replica.is_alive():
            raise RuntimeError(f"replica {self.rank}: engine exited with code {self._replica.exit_code}")

    # The coordinator's calls; the first argument names the replica (see ``serve_router.TO_REPLICA``).
    def info(self, _: dict) -> tuple[int, str, ReplicaInfo]:
        return self.rank, self._replica_tag, self._info

    def status(self, _: dict) -> tuple[str, int | None, dict[str, float] | None]:
        """This Serve replica's tag, its engine's exit code (None while it runs) and its counters."""
        return self._replica_tag, self._replica.exit_code, read_counters(self._info.base_url)

    def mark(self, _: dict) -> OutputMark:
        return self._replica.mark()

    def output_since(self, _: dict, mark: OutputMark, num_requests: int) -> tuple[str, bytes]:
        return self._replica.output_since(mark, num_requests)

    def __del__(self) -> None:
        self._replica.stop()


class Ingress:
    """Takes the load generator's requests and streams each back from the replica the router chose."""

    def __init__(self, engines: DeploymentHandle):
        self._engines = engines.options(stream=True, method_name="complete")

    async def __call__(self, request: Request) -> StreamingResponse:
        stream = self._engines.remote(await request.json())
        rank, status = await stream.__anext__()
        return StreamingResponse(stream, status_code=status, headers={REPLICA_HEADER: str(rank)},
                                 media_type="text/event-stream")  # fmt: skip


def cell_application(engine: EngineConfig, num_replicas: int, router_kwargs: dict, replica_options: dict,
                     start_limits: StartLimits) -> serve.Application:  # fmt: skip
    """The application: ``num_replicas`` engine replicas placed by ``replica_options`` (Ray actor options: a GPU of
    the cell's type), the rules' router configured by ``router_kwargs``, and the ingress (one replica, on no CPU)."""
    engines = serve.deployment(EngineReplica, name=ENGINE_DEPLOYMENT).options(
        num_replicas=num_replicas,
        max_ongoing_requests=MAX_ONGOING_REQUESTS,
        ray_actor_options=at_normal_priority(replica_options),
        health_check_period_s=2.0,
        max_constructor_retry_count=1,  # an engine that cannot start fails the cell's attempt; the driver retries it
        **SHUTDOWN_OPTIONS,
        request_router_config=RequestRouterConfig(request_router_class=RulesRequestRouter,
                                                  request_router_kwargs=router_kwargs),  # fmt: skip
    )
    ingress = serve.deployment(Ingress, name="ingress").options(
        num_replicas=1,
        max_ongoing_requests=MAX_ONGOING_REQUESTS,
        ray_actor_options=at_normal_priority({"num_cpus": 0}),
        **SHUTDOWN_OPTIONS,
    )
    return ingress.bind(engines.bind(engine, start_limits))
