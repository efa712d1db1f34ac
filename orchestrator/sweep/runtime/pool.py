"""The sweep's workers: one cell-worker actor per slot, on the nodes that are up, and more as the autoscaler
brings nodes of launchable GPU types up.

The driver says which placements have cells waiting and how much host memory their largest replica takes;
the pool keeps a worker on every slot of those placements, asleep (no actor, no GPU held) until a cell needs it:
the driver wakes as many as its queue of single cells can use, and a gang takes asleep workers as they are, so a
sweep of three cells on a node of eight GPUs starts three actors, not eight. The pool creates again a worker whose
actor could not start (no cell ran on it, so no attempt is charged), asks the autoscaler for the GPUs the waiting
cells can use, and tells the driver which placements to give up on and why.

A node can leave mid-sweep (a preempted spot GPU, a raylet that died): the worker that stops answering has its
node's raylet asked at once, and a node that does not answer is lost. Its workers leave the pool, its cells'
attempts end with the node named, and no worker is made there again; the driver retries those cells on the
type's other workers, on nodes that join (the inventory is read again every few seconds), or on nodes the
autoscaler brings up, and gives up on a type whose nodes are all gone after ``--scale-up-timeout-s``.

A cell of several GPUs runs on a gang: that many idle workers of its type step aside (their actors end, freeing
each GPU and its host memory), each group of them on one node (``gang_of``). A routed cell's replicas are placed
on those GPUs by Ray Serve, one group per replica, and a coordinator that holds no GPU runs the cell; a
tensor-parallel replica talked to directly is run by a worker that holds its whole group. When the cell ends, the
workers come back asleep, as they began: another gang takes them as they are, a cell of one worker wakes one (its
actor made then), and a sweep whose last cells were gangs' ends without starting their workers again.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace

from orchestrator.cell.spec import CellSpec
from orchestrator.inputs.validation import first_line
from orchestrator.sweep.cluster.inventory import Inventory, NodeInfo, Slot
from orchestrator.sweep.planning.spec import RunLimits
from orchestrator.sweep.runtime.cluster_watch import ClusterWatch
from orchestrator.sweep.runtime.ledger import StartedAttempt
from orchestrator.sweep.runtime.worker import WorkerStatus, start_worker

# A worker whose actor cannot be created this many times in a row gives up its slot.
MAX_WORKER_CREATIONS = 20
# How long the pool waits for a worker to stop its replica before it ends the actor (and the replica with it).
STOP_GRACE_S = 60.0


class WorkerState(enum.Enum):
    STARTING = "starting"  # its actor is being created (again, after a failed creation)
    UP = "up"  # its actor answered: it takes cells
    ASLEEP = "asleep"  # no actor (new, or back from a gang): a gang takes it as it is, a single cell wakes it first
    GONE = "gone"  # left the pool: its actor could not be created MAX_WORKER_CREATIONS times in a row


@dataclass(frozen=True)
class Readiness:
    state: WorkerState
    reason: str | None = None  # why a worker is gone


@dataclass
class InFlight:
    """A cell attempt running on a worker."""

    started: StartedAttempt
    ref: object  # the worker's pending ``run`` call
    started_at: float = field(default_factory=time.monotonic)

    @property
    def cell(self) -> CellSpec:
        return self.started.cell


@dataclass
class Worker:
    """A slot's actor. It takes cells only once it is up (``ready`` resolved): a node that has just joined
    is listed by ``ray.nodes()`` a moment before Ray's scheduler can place on it, and an actor pinned there
    in that moment is cancelled, which must not cost a cell an attempt."""

    slot: Slot
    actor: object = None  # None while asleep: until a cell needs it
    ready: object = None  # the first status() call; None once it answered
    num_creations: int = 0  # in a row, without the actor coming up
    group: tuple | None = None  # server group of the last cell, to prefer cells that reuse the replica
    attempt: InFlight | None = None  # the attempt in flight on this worker, None while idle
    lent: tuple[Worker, ...] = ()  # a gang's coordinator: the workers that stepped aside for its replicas

    @property
    def num_slots(self) -> int:
        return len(self.lent) or 1

    @property
    def asleep(self) -> bool:
        return self.actor is None

    def create(self) -> None:
        self.actor = start_worker(self.slot)
        self.ready = self.actor.status.remote()
        self.num_creations += 1
        self.group = None


class WorkerPool:
    def __init__(self, inventory: Inventory, scale_up_timeout_s: float):
        self.cluster = ClusterWatch(inventory, scale_up_timeout_s)
        self.workers: list[Worker] = []
        # (placement, node id) pairs that have had workers, each with the replica size its workers were made for
        self._slotted_nodes: dict[tuple[str, str], float] = {}

    @property
    def inventory(self) -> Inventory:
        return self.cluster.inventory

    @property
    def lost_nodes(self) -> dict[str, NodeInfo]:
        """By node id: the nodes that left the cluster during the sweep."""
        return self.cluster.lost_nodes

    def carry_into(self, inventory: Inventory) -> None:
        """Carry the pool, idle, into another run of its sweep in this process (a search's next round), on that
        run's reading of the cluster: its workers stay, with the replicas they keep (``add_workers`` ends those made
        for another replica size)."""
        self.cluster.inventory = inventory

    def in_flight(self) -> list[Worker]:
        return [worker for worker in self.workers if worker.attempt is not None]

    def add_workers(self, replica_gib: Mapping[str, float]) -> None:
        """A worker, asleep, for every slot on the nodes of the placements in ``replica_gib`` (each with the host
        memory of its largest replica) that have none yet; idle workers that a carried pool made for another size
        end first, their nodes slotted again."""
        busy = {(worker.slot.gpu, worker.slot.node_id) for worker in self.in_flight()}
        resized = {where for where, gib in self._slotted_nodes.items()
                   if where[0] in replica_gib and gib != replica_gib[where[0]] and where not in busy}  # fmt: skip
        ended = [worker for worker in self.workers if (worker.slot.gpu, worker.slot.node_id) in resized]
        _end_actors(ended, STOP_GRACE_S)
        self.workers = [worker for worker in self.workers if worker not in ended]
        for where in resized:
            del self._slotted_nodes[where]
        for placement, gib in replica_gib.items():
            slots = [s for s in self.inventory.slots(placement, gib)
                     if (placement, s.node_id) not in self._slotted_nodes and s.node_id not in self.lost_nodes]  # fmt: skip
            num_existing = self.num_slots(placement)
            self.workers += [Worker(replace(slot, index=index))
                             for index, slot in enumerate(slots, start=num_existing)]  # fmt: skip
            self._slotted_nodes |= {(placement, slot.node_id): gib for slot in slots}

    def slots_in_flight(self, placement: str) -> int:
        """The placement's slots whose workers run a cell now (a gang's all of them)."""
        return sum(worker.num_slots for worker in self.in_flight() if worker.slot.gpu == placement)

    def num_slots(self, placement: str) -> int:
        """The placement's slots that have workers, counting those lent to gangs."""
        return sum(worker.num_slots for worker in self.workers if worker.slot.gpu == placement)

    def scale(self, waiting: Mapping[str, int], replica_gib: Mapping[str, float]) -> dict[str, str]:
        """For the placements in ``waiting`` (slots the cells queued or running take): read the cluster again,
        drop the workers of nodes that left it, start workers on nodes that joined, ask the autoscaler for GPUs, and
        return the placements to give up on, with the reason (``ClusterWatch.give_ups``)."""
        if not waiting or not self.cluster.refresh():
            return {}
        alive = {node.node_id for node in self.inventory.nodes}
        for worker in list(self.workers):
            if worker.slot.node_id not in alive and (lost := self.node_lost(worker)):
                self.drop_node(lost)
        self.add_workers({gpu: replica_gib[gpu] for gpu, count in waiting.items() if count})
        return self.cluster.give_ups(waiting, replica_gib, self.num_slots)

    def node_lost(self, worker: Worker) -> NodeInfo | None:
        """The worker's node if it has left the cluster."""
        return self.cluster.lost(worker.slot.node_id)

    def drop_node(self, node: NodeInfo) -> None:
        """A node that left: its idle workers leave the pool (those with a cell in flight leave as their cells end),
        and no worker is made there again."""
        self.lost_nodes[node.node_id] = node
        for worker in [w for w in self.workers if w.slot.node_id == node.node_id and w.attempt is None]:
            _kill_quietly(worker)
            self.workers.remove(worker)

    def withdraw(self) -> None:
        """Drop the request to the autoscaler, so that nodes the sweep no longer needs can go."""
        self.cluster.withdraw()

    def readiness(self, worker: Worker) -> Readiness:
        """Up once the worker's actor answered, starting while it starts, asleep while it has none (``wake`` makes
        it); an actor whose creation failed is created again, and after ``MAX_WORKER_CREATIONS`` failures in a row
        the worker leaves the pool, gone with the reason."""
        import ray

        if worker.asleep:
            return Readiness(WorkerState.ASLEEP)
        if worker.ready is None:
            return Readiness(WorkerState.UP)
        if not ray.wait([worker.ready], timeout=0)[0]:
            return Readiness(WorkerState.STARTING)
        try:
            ray.get(worker.ready)
            worker.ready, worker.num_creations = None, 0
            return Readiness(WorkerState.UP)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError) as error:
            if lost := self.node_lost(worker):
                self.drop_node(lost)
                return Readiness(WorkerState.GONE, f"{lost.label} left the cluster")
            if worker.num_creations < MAX_WORKER_CREATIONS:
                worker.create()
                return Readiness(WorkerState.STARTING)
            self.workers.remove(worker)
            return Readiness(WorkerState.GONE, first_line(error))

    def wake(self, worker: Worker) -> None:
        """Make the actor of an asleep worker, for a cell of one worker (it takes cells once up)."""
        worker.create()

    def run(self, worker: Worker, started: StartedAttempt, limits: RunLimits) -> None:
        """Start ``started``'s cell on ``worker`` (up and idle)."""
        worker.attempt = InFlight(started, worker.actor.run.remote(started.cell, limits))
        worker.group = started.cell.server_group

    def run_gang(self, workers: list[Worker], started: StartedAttempt, limits: RunLimits) -> Worker:
        """Start ``started``'s cell on a gang of ``workers`` (up and idle, of the cell's type, from ``gang_of``): they
        step aside, and on the first one's node a coordinator runs a routed cell (holding nothing: Serve places the
        replicas), or a worker holding all their GPUs runs a tensor-parallel replica; returns that worker."""
        _end_actors(workers, STOP_GRACE_S)
        for worker in workers:
            self.workers.remove(worker)
        cell, routed = started.cell, started.cell.router is not None
        slot = replace(workers[0].slot, gang_size=len(workers), num_gpus=0 if routed else cell.tp,
                       memory_gib=0.0 if routed else cell.replica_host_gib)  # fmt: skip
        coordinator = Worker(slot, lent=tuple(workers))
        coordinator.create()
        self.workers.append(coordinator)
        self.run(coordinator, started, limits)
        return coordinator

    def release(self, worker: Worker, restart: bool = False) -> InFlight:
        """End the worker's attempt and hand it back; with ``restart``, its actor is replaced first (a dead
        or silent worker), or leaves the pool with its node if that was lost. A gang's coordinator ends instead,
        and the workers it had come back."""
        attempt = worker.attempt
        if worker.lent:
            self._disband(worker, stopped=not restart)
        elif restart:
            self.restart(worker)
        worker.attempt = None
        return attempt

    def _disband(self, coordinator: Worker, stopped: bool) -> None:
        """End a gang's coordinator and create its workers again (on nodes still in the cluster); the cell's
        replicas go first unless its coordinator ``stopped`` them itself (its cell returned)."""
        _end_actors([coordinator], STOP_GRACE_S if stopped else 0.0)
        if not stopped:
            _stop_routed_replicas(coordinator)
        self.workers.remove(coordinator)
        for worker in [w for w in coordinator.lent if w.slot.node_id not in self.lost_nodes]:
            worker.actor = worker.ready = None  # asleep: a gang takes it as it is, a single cell wakes it
            worker.num_creations = 0
            self.workers.append(worker)

    def restart(self, worker: Worker) -> None:
        _kill_quietly(worker)
        _stop_routed_replicas(worker)
        if worker.slot.node_id in self.lost_nodes:
            self.workers.remove(worker)
            return
        worker.num_creations = 0
        worker.create()

    def statuses(self, workers: list[Worker]) -> list[WorkerStatus | None]:
        """Each worker's status, asked of all at once; None for one that does not answer within a second."""
        import ray

        refs = [worker.actor.status.remote() for worker in workers]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=1.0)
        answered = set(ready)
        statuses = []
        for ref in refs:
            try:
                statuses.append(ray.get(ref) if ref in answered else None)
            except ray.exceptions.RayError:
                statuses.append(None)
        return statuses

    def shutdown(self) -> None:
        """Let every worker stop its replica, then end the actors."""
        self._end_all(STOP_GRACE_S)

    def kill(self) -> None:
        """End every actor at once; the reaper in each worker's replica takes the server down with it."""
        self._end_all(0.0)

    def _end_all(self, grace_s: float) -> None:
        _end_actors(self.workers, grace_s)
        for worker in self.workers:
            _stop_routed_replicas(worker)


def gang_of(idle: list[Worker], groups: tuple[int, ...]) -> list[Worker] | None:
    """Idle workers for a gang of ``groups`` (GPUs that must share a node, per group), or None until there are
    enough: each group, largest first, from the node with the fewest idle workers that still holds it (best fit,
    so a node left whole stays free for a larger group)."""
    by_node: dict[str, list[Worker]] = {}
    for worker in idle:
        by_node.setdefault(worker.slot.node_id, []).append(worker)
    gang: list[Worker] = []
    for size in sorted(groups, reverse=True):
        fitting = [workers for workers in by_node.values() if len(workers) >= size]
        if not fitting:
            return None
        workers = min(fitting, key=len)
        gang += workers[:size]
        del workers[:size]
    return gang


def _end_actors(workers: list[Worker], grace_s: float) -> None:
    """Let each worker stop its replica for up to ``grace_s`` (none with 0), then end the actors (a worker back from a
    gang may have none yet)."""
    import ray

    workers = [worker for worker in workers if worker.actor is not None]
    if grace_s > 0:
        try:
            ray.get([worker.actor.shutdown.remote() for worker in workers], timeout=grace_s)
        except (ray.exceptions.RayError, TimeoutError):
            pass
    for worker in workers:
        ray.kill(worker.actor)


def _kill_quietly(worker: Worker) -> None:
    """End a worker's actor, which may be gone already with its node."""
    import ray

    with suppress(ray.exceptions.RayError, ValueError):
        ray.kill(worker.actor)


def _stop_routed_replicas(worker: Worker) -> None:
    """The replicas of a routed cell live in their Serve application, not in the worker: a killed worker's
    attempt leaves them serving, so its application goes too."""
    if worker.attempt is not None and worker.attempt.cell.router is not None:
        from orchestrator.replica.replica_set import delete_application

        delete_application(worker.attempt.cell.key)
