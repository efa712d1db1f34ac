"""Running the load generator inside Ray actors, several of which can split one cell's jobs.

The actors share one start epoch (a Unix time set once they are all ready), so their records share a time
axis; each takes every n-th job of the plan. This is the only place the load generator meets Ray.
"""

from __future__ import annotations

import time

from orchestrator.workload.client import RequestOptions
from orchestrator.workload.loadgen import LoadGenerator, ShardResult
from orchestrator.workload.plan import WorkloadPlan

# Time between the actors reporting ready and the first planned arrival, for the plans to reach them.
START_LEAD_S = 1.0


def drive_in_process(plan: WorkloadPlan, base_url: str, options: RequestOptions) -> ShardResult:
    return LoadGenerator(base_url, options).run(plan, epoch_unix=time.time() + 0.2)


def drive_with_actors(
    plan: WorkloadPlan,
    base_url: str,
    options: RequestOptions,
    num_actors: int,
    scheduling_options: dict | None = None,
) -> ShardResult:
    """Split ``plan`` over ``num_actors`` Ray actors and merge their records, ordered by job index.

    ``scheduling_options`` go to ``.options()`` of each actor (for example a node-affinity strategy that
    keeps the clients on the replica's node). Ray must already be initialised.
    """
    import ray

    actor_class = ray.remote(num_cpus=0)(_LoadGenActor)
    actors = [actor_class.options(**(scheduling_options or {})).remote(base_url, options) for _ in range(num_actors)]
    try:
        ray.get([actor.ready.remote() for actor in actors])
        epoch = time.time() + START_LEAD_S
        shards = ray.get([actor.run.remote(plan.shard(i, num_actors), epoch) for i, actor in enumerate(actors)])
    finally:
        for actor in actors:
            ray.kill(actor)
    return merge_shards(shards)


def merge_shards(shards: list[ShardResult]) -> ShardResult:
    requests = sorted((r for shard in shards for r in shard.requests), key=lambda r: (r.job_index, r.turn))
    jobs = sorted((job for shard in shards for job in shard.jobs), key=lambda job: job.job_index)
    return ShardResult(requests=tuple(requests), jobs=tuple(jobs))


class _LoadGenActor:
    def __init__(self, base_url: str, options: RequestOptions):
        self._generator = LoadGenerator(base_url, options)

    def ready(self) -> bool:
        return True

    def run(self, plan: WorkloadPlan, epoch_unix: float) -> ShardResult:
        return self._generator.run(plan, epoch_unix)
