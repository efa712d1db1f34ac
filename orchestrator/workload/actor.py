"""Running the load generator in the background, in this process or in Ray actors, with live progress.

A started run is a ``LoadRun``: poll ``wait``, read ``progress``, take the ``result``, or ``cancel`` it.
Actors share one start epoch (a Unix time set once they are all ready), so their records share a time
axis; each takes every n-th job of the plan. This is the only place the load generator meets Ray.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from orchestrator.records.cell import RequestOptions
from orchestrator.workload.loadgen import LoadGenerator, LoadProgress, ShardResult
from orchestrator.workload.plan import WorkloadPlan

# Time between the actors reporting ready and the first planned arrival, for the plans to reach them.
START_LEAD_S = 1.0


class LoadRun(Protocol):
    def wait(self, timeout_s: float) -> bool:
        """True once every job has an outcome."""

    def progress(self) -> LoadProgress: ...

    def result(self) -> ShardResult: ...

    def cancel(self) -> None:
        """Abandon the run (its server is gone or hung); ``result`` is not available afterwards."""


class InProcessRun:
    """The load generator on a background thread of this process."""

    def __init__(self, plan: WorkloadPlan, base_url: str, options: RequestOptions):
        self._generator = LoadGenerator(base_url, options)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="loadgen")
        self._future: Future = self._pool.submit(self._generator.run, plan, time.time() + 0.2)

    def wait(self, timeout_s: float) -> bool:
        try:
            self._future.exception(timeout=timeout_s)
        except TimeoutError:
            return False
        return True

    def progress(self) -> LoadProgress:
        return self._generator.progress

    def result(self) -> ShardResult:
        result = self._future.result()
        self._pool.shutdown()
        return result

    def cancel(self) -> None:
        # A thread cannot be killed; callers cancel after stopping the server, which ends every stream.
        self._pool.shutdown(wait=False, cancel_futures=True)


class ActorRun:
    """The plan split over Ray actors (``scheduling_options``: their Ray options, e.g. the replica's node, their
    worker's niceness)."""

    def __init__(
        self,
        plan: WorkloadPlan,
        base_url: str,
        options: RequestOptions,
        num_actors: int,
        scheduling_options: dict | None = None,
    ):
        import ray

        # Two threads: ``run`` blocks one while ``progress`` answers on the other.
        actor_class = ray.remote(num_cpus=0, max_concurrency=2)(_LoadGenActor)
        self._actors = [
            actor_class.options(**(scheduling_options or {})).remote(base_url, options) for _ in range(num_actors)
        ]
        ray.get([actor.ready.remote() for actor in self._actors])
        epoch = time.time() + START_LEAD_S
        self._refs = [actor.run.remote(plan.shard(i, num_actors), epoch) for i, actor in enumerate(self._actors)]
        self._progress = LoadProgress(jobs_total=len(plan.jobs))

    def wait(self, timeout_s: float) -> bool:
        import ray

        _, pending = ray.wait(self._refs, num_returns=len(self._refs), timeout=timeout_s)
        return not pending

    def progress(self) -> LoadProgress:
        import ray

        try:
            parts = ray.get([actor.progress.remote() for actor in self._actors], timeout=5)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError):
            return self._progress  # the last known counts
        total = LoadProgress()
        for part in parts:
            total = total.plus(part)
        self._progress = total
        return total

    def result(self) -> ShardResult:
        import ray

        try:
            return merge_shards(ray.get(self._refs))
        finally:
            self.cancel()

    def cancel(self) -> None:
        import ray

        for actor in self._actors:
            ray.kill(actor)


def drive_with_actors(
    plan: WorkloadPlan,
    base_url: str,
    options: RequestOptions,
    num_actors: int,
    scheduling_options: dict | None = None,
) -> ShardResult:
    """Split ``plan`` over ``num_actors`` Ray actors and merge their records (Ray must be initialised)."""
    return ActorRun(plan, base_url, options, num_actors, scheduling_options).result()


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

    def progress(self) -> LoadProgress:
        return self._generator.progress
