"""The routers' rules (``routing.rules``) as a Ray Serve request router, in front of a cell's engine replicas.

Serve asks ``choose_replicas`` once per request with the replicas it may use; this router reads the request's job
and prompt, gives the rules each replica's requests in flight (counted here from Serve's routed and completed
callbacks, which is the load the simulator's routers see too) and returns the one replica the rules chose. Replicas
are known by the rank each reports at start (``record_replica_metadata``), so a rule's replica index is the rank
recorded with each request.

A call that names a replica (``TO_REPLICA`` in its first argument: the cell's control calls, such as reading one
replica's counters) goes to that replica and is not shown to the rules.
"""

from __future__ import annotations

from collections import Counter

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from orchestrator.routing.prefix_index import CHUNK_CHARS, text_block_hashes
from orchestrator.routing.rules import RouteRequest, RouterSetup, make_router

TO_REPLICA = "to_replica"
RANK = "rank"


class RulesRequestRouter(RequestRouter):
    def initialize_state(self, router: str, num_replicas: int, seed: int = 0, capacity_blocks: int | None = None,
                         chunk_chars: int = CHUNK_CHARS) -> None:  # fmt: skip
        self._rules = make_router(router, RouterSetup(num_replicas, seed, capacity_blocks))
        self._chunk_chars = chunk_chars
        self._in_flight: Counter[ReplicaID] = Counter()

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        by_rank = {replica.replica_metadata[RANK]: replica for replica in candidate_replicas
                   if RANK in replica.replica_metadata}  # fmt: skip
        route = pending_request.args[0] if pending_request is not None and pending_request.args else {}
        if TO_REPLICA in route:
            target = by_rank.get(route[TO_REPLICA])
            return [[target]] if target is not None else []  # Serve asks again once the replica is up
        if not by_rank:
            return []
        loads = {rank: self._in_flight[replica.replica_id] for rank, replica in by_rank.items()}
        return [[by_rank[self._rules.choose(self._route_request(route), loads)]]]

    def _route_request(self, body: dict) -> RouteRequest:
        job_id = str((body.get("vllm_xargs") or {}).get("job_id", ""))
        prompt = body.get("prompt") if self._rules.reads_prefix else None
        return RouteRequest(job_id, text_block_hashes(prompt, self._chunk_chars) if isinstance(prompt, str) else ())

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result) -> None:
        self._in_flight[replica_id] += 1

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        self._in_flight[replica_id] -= 1
        if self._in_flight[replica_id] <= 0:
            del self._in_flight[replica_id]
