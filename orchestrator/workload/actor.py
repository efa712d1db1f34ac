"""Running the load generator in the background, in this process or in Ray actors, with live progress.

A started run is a ``LoadRun``: poll ``wait``, read ``progress``, take the ``result``, or ``cancel`` it.
Actors share one start epoch (a Unix time set once they are all ready), so their records share a time
axis; each takes every n-th job of the plan; ``ClientActors`` keeps them from run to run. This is the only place
the load generator meets Ray.
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


class ClientActors:
    """The load generator's Ray actors, kept from run to run (``scheduling_options``: their Ray options, e.g. the
    replica's node, their worker's niceness). Each actor costs a Ray worker process to start, a second or more on a
    busy node, and one asked for with a runtime environment of its own never finds a prestarted worker; so a cell
    worker keeps its clients across its cells, each run giving every actor a fresh generator. A run cancelled or
    failed kills them (their streams must end with their server), and the next run starts new ones."""

    def __init__(self, scheduling_options: dict | None = None):
        self._options = scheduling_options or {}
        self._actors: list = []

    @property
    def actor_ids(self) -> tuple[str, ...]:
        """The Ray ids of the actors kept for the next run (none before the first run and after a cancel)."""
        return tuple(actor._actor_id.hex() for actor in self._actors)

    def start(self, plan: WorkloadPlan, base_url: str, options: RequestOptions, num_actors: int) -> ActorRun:
        """``plan`` split over ``num_actors`` actors against ``base_url``, begun."""
        import ray

        if len(self._actors) != num_actors:
            self.shutdown()
        try:
            self._prepare(base_url, options, num_actors)
        except ray.exceptions.RayActorError:  # one died since the last run: every run starts from live actors
            self.shutdown()
            self._prepare(base_url, options, num_actors)
        return ActorRun(plan, self._actors, self)

    def _prepare(self, base_url: str, options: RequestOptions, num_actors: int) -> None:
        import ray

        if not self._actors:
            # Two threads: ``run`` blocks one while ``progress`` answers on the other.
            actor_class = ray.remote(num_cpus=0, max_concurrency=2)(_LoadGenActor)
            self._actors = [actor_class.options(**self._options).remote() for _ in range(num_actors)]
        ray.get([actor.prepare.remote(base_url, options) for actor in self._actors])

    def shutdown(self) -> None:
        import ray

        for actor in self._actors:
            ray.kill(actor)
        self._actors = []


class ActorRun:
    """One plan running on a set of ``ClientActors``, each actor taking every n-th job."""

    def __init__(self, plan: WorkloadPlan, actors: list, clients: ClientActors):
        epoch = time.time() + START_LEAD_S
        self._actors, self._clients = actors, clients
        self._refs = [actor.run.remote(plan.shard(i, len(actors)), epoch) for i, actor in enumerate(actors)]
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
        """The merged records; the actors stay for the next run, unless one of them failed."""
        import ray

        try:
            return merge_shards(ray.get(self._refs))
        except BaseException:
            self.cancel()
            raise

    def cancel(self) -> None:
        self._clients.shutdown()


def merge_shards(shards: list[ShardResult]) -> ShardResult:
    requests = sorted((r for shard in shards for r in shard.requests), key=lambda r: (r.job_index, r.turn))
    jobs = sorted((job for shard in shards for job in shard.jobs), key=lambda job: job.job_index)
    return ShardResult(requests=tuple(requests), jobs=tuple(jobs))


class _LoadGenActor:
    """A generator per run: ``prepare`` gives the next run its server and a fresh count for ``progress``."""

    def __init__(self):
        self._generator: LoadGenerator | None = None

    def prepare(self, base_url: str, options: RequestOptions) -> None:
        self._generator = LoadGenerator(base_url, options)

    def run(self, plan: WorkloadPlan, epoch_unix: float) -> ShardResult:
        return self._generator.run(plan, epoch_unix)

    def progress(self) -> LoadProgress:
        return self._generator.progress
