"""A cell's replicas behind a router, from the side of the cell that runs them: deploy the Serve application
(``serve_app``), watch every replica while the load runs, collect each one's log, trace and counters, tear down.

Ray must be initialised. Serve's HTTP proxy is started on loopback the first time (one per Ray cluster), each cell
being an application of its own under its own route. A replica whose engine exits is restarted by Serve with an
empty cache; that would silently measure the rest of the cell on a different replica, so ``failure`` reports a
replica lost the moment its engine exited or its Serve replica changed, and the cell stops there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ray import serve

from orchestrator.inputs.validation import first_line
from orchestrator.records.scheduler_trace import merged_traces
from orchestrator.records.schema import RequestRecord
from orchestrator.replica.config import EngineConfig, VllmEngineConfig
from orchestrator.replica.engines import EnginesPoll
from orchestrator.replica.replica import OutputMark, ReplicaInfo
from orchestrator.replica.serve_app import ENGINE_DEPLOYMENT, cell_application
from orchestrator.replica.serve_router import TO_REPLICA
from orchestrator.replica.server import ServerStartError, StartLimits, free_port
from orchestrator.replica.vllm_server import HTTP_KEEP_ALIVE_S
from orchestrator.routing.prefix_index import chunks_held
from orchestrator.routing.rules import RouterKind

CONTROL_TIMEOUT_S = 30.0


def application_name(cell_key: str) -> str:
    """The Serve application of a cell's replicas, named by the cell's key (one cell, one application)."""
    return f"cell-{cell_key}"


def delete_application(cell_key: str) -> None:
    """Delete a cell's application if it is still deployed: a worker killed mid-cell (a hang, the driver's
    backstop, SIGTERM) leaves its replicas serving, and only the driver knows which cell that was."""
    if serve.context._get_global_client(raise_if_no_controller_running=False) is not None:
        name = application_name(cell_key)
        if name in serve.status().applications:
            serve.delete(name)


class ReplicaSet:
    def __init__(self, engine: EngineConfig, count: int, router: RouterKind, *, cell_key: str, seed: int = 0,
                 replica_options: dict | None = None, start_limits: StartLimits = StartLimits()):  # fmt: skip
        self._engine, self._count, self._router, self._seed = engine, count, router, seed
        self._name = application_name(cell_key)
        self._replica_options = replica_options or {"num_cpus": 0}
        self._start_limits = start_limits
        self._handle = None
        self._tags: list[str] = []
        self._last_poll: EnginesPoll | None = None
        self.infos: tuple[ReplicaInfo, ...] = ()

    def start(self) -> tuple[ReplicaInfo, ...]:
        """Deploy the replicas and wait until each engine answers; raises ``ServerStartError`` when one cannot."""
        port = _serve_port()
        self.base_url = f"http://127.0.0.1:{port}/{self._name}"
        application = cell_application(self._engine, self._count, self._router_kwargs(), self._replica_options,
                                       self._start_limits)  # fmt: skip
        try:
            serve.run(application, name=self._name, route_prefix=f"/{self._name}")
        except RuntimeError as error:  # Serve gave up on a replica whose engine would not start
            self.stop()
            raise ServerStartError(f"{self._count} replicas of {self._name} did not start: {error}") from None
        self._handle = serve.get_deployment_handle(ENGINE_DEPLOYMENT, app_name=self._name)
        answers = [self._call(rank, "info") for rank in range(self._count)]
        self._tags = [tag for _, tag, _ in answers]
        self.infos = tuple(info for _, _, info in answers)
        return self.infos

    def _router_kwargs(self) -> dict:
        engine = self._engine
        fixed_pool = isinstance(engine, VllmEngineConfig) and engine.num_kv_blocks is not None
        capacity = chunks_held(engine.num_kv_blocks, engine.block_size) if fixed_pool else None
        return {"router": RouterKind(self._router).value, "num_replicas": self._count, "seed": self._seed,
                "capacity_blocks": capacity}  # fmt: skip

    def _call(self, rank: int, method: str, *args):
        response = getattr(self._handle, method).remote({TO_REPLICA: rank}, *args)
        return response.result(timeout_s=CONTROL_TIMEOUT_S)

    def poll(self) -> EnginesPoll:
        """Every replica's health and counters. A replica is lost when its engine exited or Serve replaced it (with
        an empty cache); the failure names it and the requests it held at the previous poll, which it lost."""
        failure, counters = None, []
        for rank in range(self._count):
            try:
                tag, exit_code, replica_counters = self._call(rank, "status")
            except TimeoutError:  # Serve is starting a replacement, whose engine takes its time
                tag, exit_code, replica_counters = None, None, None
            counters.append(replica_counters or {})
            if failure is None and (exit_code is not None or tag != self._tags[rank]):
                what = (f"exited with code {exit_code}" if exit_code is not None else
                        f"did not answer within {CONTROL_TIMEOUT_S:g} s" if tag is None else "was replaced by Serve")
                lost = self._last_poll.in_flight(rank) if self._last_poll else 0
                failure = f"replica {rank} of {self._count} {what} during the cell, losing {lost} requests in flight"
        self._last_poll = EnginesPoll(failure, tuple(counters))
        return self._last_poll

    def mark(self) -> tuple[OutputMark, ...]:
        return tuple(self._call(rank, "mark") for rank in range(self._count))

    def output_since(self, mark: Sequence[OutputMark], requests: Sequence[RequestRecord]) -> tuple[str, bytes]:
        """Each replica's server log (under a line naming it) and the replicas' scheduler traces merged."""
        served = Counter(request.replica for request in requests)
        logs, traces = [], []
        for rank in range(self._count):
            try:
                log, trace = self._call(rank, "output_since", mark[rank], served[rank])
            except Exception as error:  # noqa: BLE001  a lost replica's output went with it
                log, trace = f"(its output could not be read: {first_line(error)})\n", b""
            logs.append(f"=== replica {rank} ===\n{log}")
            traces.append(trace)
        return "".join(logs), merged_traces(traces)

    def stop(self) -> None:
        """Delete the application; each engine replica stops its server as Serve stops it."""
        serve.delete(self._name)
        self._handle = None


def _serve_port() -> int:
    """The port of Serve's HTTP proxy on this node: the running one's, or a free one for a new one on loopback, with
    a keep-alive longer than the load generator keeps an idle connection (as the engine servers have)."""
    client = serve.context._get_global_client(raise_if_no_controller_running=False)
    if client is not None:
        return client.http_config.port
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port, "keep_alive_timeout_s": HTTP_KEEP_ALIVE_S})
    return port
