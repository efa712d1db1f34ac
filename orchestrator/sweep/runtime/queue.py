"""What a sweep runs next: its cells queued per placement, in grid order or a budgeted run's; each idle worker given
the cell that reuses its replica, a gang's cell once all its workers are idle; a crashed cell put back at the head
of its queue; and why a cell that cannot run pends. The queue decides and starts nothing: the driver
(``runtime.driver``) carries its choices out on the pool, as vLLM's scheduler decides what its engine core runs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from orchestrator.budget.spend import OVERRUN_LIMIT, Spending
from orchestrator.cell.spec import CellSpec, EngineKind
from orchestrator.sweep.runtime.pool import Worker, gang_of

# A cell whose node is lost is retried without charging it an attempt (the fault is the cluster's, as SkyPilot
# recovers a preempted job apart from its own failures), up to this many lost nodes per cell and run.
MAX_NODE_LOSSES = 5


@dataclass
class MeasuringOrder:
    """How a budgeted run measures: its real cells in this order (by cell key), starting each only where its
    estimate fits what ``spending`` has left, and stopping each that runs past its allowance."""

    rank: Mapping[str, int]
    spending: Spending
    nodes_started: set[str] = field(default_factory=set)  # the nodes this run has started a server on: warm caches
    stopped: dict[str, str] = field(default_factory=dict)  # by cell key: the cells stopped past their allowance, why

    def cold(self, workers: list[Worker]) -> bool:
        """Whether a server started on ``workers`` starts cold: on a node this run has started no server on yet."""
        return any(worker.slot.node_id not in self.nodes_started for worker in workers)


@dataclass
class Choice:
    """What the queue chose for one placement's idle workers: cells to start on them, asleep workers to wake, and,
    in a budgeted run, why the rest of the placement's queue is left for a later run."""

    starts: list[tuple[CellSpec, list[Worker]]] = field(default_factory=list)
    wake: list[Worker] = field(default_factory=list)
    left_for_later: str | None = None


class CellQueue:
    """The queued cells per placement, the attempts this run made, and what was given up or left for later."""

    def __init__(self, measuring: MeasuringOrder | None):
        self.measuring = measuring
        self.queues: dict[str, list[CellSpec]] = defaultdict(list)
        # Attempts this driver made per cell, and those of them lost with their node: a crashed cell is retried until
        # it has had max_attempts here, not counting the lost ones (the attempt numbers in the tracking store also
        # count earlier runs of the sweep).
        self.attempts_this_run: dict[str, int] = defaultdict(int)
        self.node_losses: dict[str, int] = defaultdict(int)
        self.unavailable: dict[str, str] = {}  # placements given up on during the run, with the reason
        self.left_for_later: dict[str, str] = {}  # per placement, why its next cell did not fit the budget

    def fill(self, cells: list[CellSpec]) -> None:
        """Queue ``cells``. A routed cell on GPUs waits for its gang of idle workers: cells of single workers go
        first, so that it does not hold idle GPUs while others queue behind it. A budgeted run keeps its order."""
        if self.measuring is not None:
            ranks = self.measuring.rank  # it ranks the real cells; a simulated one sits in the sim queue alone
            queued = sorted(cells, key=lambda cell: ranks.get(cell.key, -1))
        else:
            queued = sorted(cells, key=lambda cell: cell.gang_size > 0)
        for cell in queued:
            self.queues[cell.placement].append(cell)

    def __bool__(self) -> bool:
        return any(self.queues.values())

    def __len__(self) -> int:
        return sum(len(queue) for queue in self.queues.values())

    def waiting_slots(self, placement: str) -> int:
        """The slots the queued cells of ``placement`` take."""
        return sum(max(1, cell.gang_size) for cell in self.queues[placement])

    def without_slots(self, placement: str, left: int, why: str | None) -> str | None:
        """Why ``placement`` is given up now that a slot's worker could not start (``why``) and ``left`` slots
        remain: none is left, or too few for the largest gang its queue waits for; None while its cells can run."""
        largest_gang = max((cell.gang_size for cell in self.queues[placement]), default=0)
        if not left:
            return f"no {placement} worker could start: {why}"
        if largest_gang > left:
            return (f"a cell of {largest_gang} replicas needs {largest_gang} {placement} GPUs at once, and {left} "
                    f"{placement} workers remain ({why})")  # fmt: skip
        return None

    def give_up(self, placement: str, reason: str) -> None:
        """The queued cells of ``placement`` stay pending for ``reason``; a re-run tries them again."""
        self.unavailable[placement] = reason
        self.queues[placement].clear()

    def leave_for_later(self, placement: str, why: str) -> int:
        """The queued cells of ``placement`` stay predicted for a later run, which starts them in the same order;
        how many they are."""
        self.left_for_later[placement] = why
        left = len(self.queues[placement])
        self.queues[placement].clear()
        return left

    def started(self, cell: CellSpec) -> None:
        self.attempts_this_run[cell.key] += 1

    def node_lost(self, cell: CellSpec) -> bool:
        """Count a node lost under ``cell``; whether the cell may still be retried for it."""
        self.node_losses[cell.key] += 1
        return self.node_losses[cell.key] <= MAX_NODE_LOSSES

    def retry(self, cell: CellSpec, retryable: bool, max_attempts: int) -> bool:
        """Put a failed ``cell`` back at the head of its queue if it may be retried (its attempts lost with a node
        not charged); whether it was."""
        charged = self.attempts_this_run[cell.key] - self.node_losses[cell.key]
        retry = retryable and charged < max_attempts
        if retry:
            self.queues[cell.placement].insert(0, cell)
        return retry

    def pending_reason(self, cell: CellSpec, has_placement: bool, done: Callable[[str], bool]) -> str | None:
        """Why ``cell`` cannot run in this cluster (``has_placement``: whether it has or can launch the cell's
        placement; ``done``: whether a cell, by key, is done), or None if it can."""
        if cell.placement in self.unavailable:
            return self.unavailable[cell.placement]
        if self.is_left_for_later(cell, done):
            return f"left for later: {self.left_for_later[cell.placement]}"
        if self.measuring is not None and cell.key in self.measuring.stopped:
            return f"left for later: {self.measuring.stopped[cell.key]}"
        if not has_placement:
            return f"no {cell.gpu} in the cluster and none its autoscaler can launch"
        return None

    def is_left_for_later(self, cell: CellSpec, done: Callable[[str], bool]) -> bool:
        """The budget left ``cell`` for a later run (a cell tried in this run ends as its attempt did)."""
        left = cell.placement in self.left_for_later and cell.placement not in self.unavailable
        return left and not self.attempts_this_run[cell.key] and not done(cell.key)

    def choose(self, placement: str, idle: list[Worker], starting: int) -> Choice:
        """The cells ``placement``'s ``idle`` workers take now, ``starting`` more of its workers being made."""
        idle = list(idle)
        if self.measuring is not None:
            return self._in_order(self.queues[placement], idle, starting)
        return self._by_replica(self.queues[placement], idle, starting)

    @staticmethod
    def _by_replica(queue: list[CellSpec], idle: list[Worker], starting: int) -> Choice:
        """Give each idle worker the first queued cell that reuses its replica, else the first cell of one worker
        (waking asleep workers for the cells of one worker that neither those up nor the ``starting`` ones take);
        then start, in queue order, each cell of a gang (a routed cell on GPUs, a tensor-parallel replica) whose idle
        workers are complete, each group of them on one node. A gang takes workers only once it has all of them, so
        no cell holds GPUs while it waits for more: the queue cannot deadlock however cells of each size mix."""
        choice = Choice()
        for worker in [worker for worker in idle if not worker.asleep]:
            singles = [index for index, cell in enumerate(queue) if not cell.gang_size]
            if not singles:
                break
            index = next((i for i in singles if queue[i].server_group == worker.group), singles[0])
            choice.starts.append((queue.pop(index), [worker]))
            idle.remove(worker)
        unserved = sum(not cell.gang_size for cell in queue) - starting
        choice.wake = [worker for worker in idle if worker.asleep][:max(0, unserved)]
        idle = [worker for worker in idle if worker not in choice.wake]
        for cell in [cell for cell in queue if cell.gang_size]:
            if (gang := gang_of(idle, cell.gang_groups)) is not None:
                queue.remove(cell)
                choice.starts.append((cell, gang))
                idle = [worker for worker in idle if worker not in gang]
        return choice

    def _in_order(self, queue: list[CellSpec], idle: list[Worker], starting: int) -> Choice:
        """A budgeted run's queue, strictly in its order: the head cell goes to an idle worker whose replica it
        reuses, else to any (a gang once all its workers are idle; an asleep worker is woken for a cell of one), if
        its estimate fits what the budget has left (a start on a node this run has started no server on is estimated
        cold). The first that does not fit leaves the rest of its placement's queue for a later run."""
        choice, spending = Choice(), self.measuring.spending
        while queue and idle:
            cell = queue[0]
            if cell.gang_size:
                if (workers := gang_of(idle, cell.gang_groups)) is None:
                    return choice
                needs_start = True
            else:
                if not (awake := [worker for worker in idle if not worker.asleep]):
                    singles = sum(not queued.gang_size for queued in queue)
                    choice.wake = idle[:max(0, singles - starting)]  # all asleep: each takes a cell once up
                    return choice
                workers = [next((worker for worker in awake if worker.group == cell.server_group), awake[0])]
                needs_start = workers[0].group != cell.server_group
            if cell.engine is not EngineKind.SIM:  # a simulated cell costs no device time
                cold = self.measuring.cold(workers)
                if (refusal := spending.refusal(cell, needs_start, cold)) is not None:
                    if not spending.waiting_may_help(cell.gpu):
                        choice.left_for_later = refusal
                    return choice
                spending.begin(cell, needs_start, cold)
                if needs_start:
                    self.measuring.nodes_started.update(worker.slot.node_id for worker in workers)
            choice.starts.append((queue.pop(0), workers))
            idle = [worker for worker in idle if worker not in workers]
        return choice


def budget_line(queue: CellQueue, pending: list[CellSpec], reasons: Callable[[CellSpec], str | None],
                done: Callable[[str], bool], predictions_name: str) -> str:  # fmt: skip
    """What a budgeted run measured, what it left for later and why, and what pends for another reason."""
    measuring = queue.measuring
    spending = measuring.spending
    budget = spending.budget
    spent = ", ".join(f"{gpu}: {_attempts(spending.measured[gpu])}, {seconds:.0f} s"
                      + (f" of {budget.by_type[gpu]:.0f} s" if gpu in budget.by_type else "")
                      for gpu, seconds in spending.spent_s.items()) or "nothing to measure"  # fmt: skip
    total = f" of {budget.total_s:.0f} s in all" if budget.total_s is not None else ""
    line = (f"--gpu-budget {budget}: measured {_attempts(sum(spending.measured.values()))} in "
            f"{sum(spending.spent_s.values()):.0f} s{total} ({spent})")  # fmt: skip
    why_pending = {cell.key: reasons(cell) or "" for cell in pending}
    left = {cell.key for cell in pending if queue.is_left_for_later(cell, done)}
    stopped = {cell.key: cell.label for cell in pending if cell.key in measuring.stopped}
    if stopped:
        line += (f"; past their allowance ({OVERRUN_LIMIT:g} x the estimate), interrupted and left for later: "
                 f"{len(stopped)} cells (" + "; ".join(f"{label}: {measuring.stopped[key]}"
                                                      for key, label in stopped.items()) + ")")  # fmt: skip
    if left:
        why = "; ".join(f"{placement}: {sum(c.placement == placement for c in pending if c.key in left)} cells, {reason}"
                        for placement, reason in queue.left_for_later.items())  # fmt: skip
        line += f"; left for later: {len(left)} cells ({why})"
    if left or stopped:
        line += (f"; their predictions stand ({predictions_name}); re-run with more "
                 "--gpu-budget to measure them in the same order, or without it to measure them all")  # fmt: skip
    else:
        line += "; nothing left for later"
    if others := sorted({why_pending[key] for key in why_pending.keys() - left - stopped.keys()}):
        line += f"; {len(pending) - len(left) - len(stopped)} cells pend ({'; '.join(others)})"
    return line


def _attempts(count: int) -> str:
    return f"{count} attempt{'' if count == 1 else 's'}"
