"""What a cell's load runs against, seen one way whether it is one replica or several behind a router
(``replica_set``): where to send requests, a poll of every replica's health and counters, and each replica's log and
scheduler trace since a mark."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from orchestrator.records.schema import RequestRecord
from orchestrator.replica.probe import RUNNING, WAITING, read_counters, work_done
from orchestrator.replica.replica import OutputMark, Replica, ReplicaInfo


@dataclass(frozen=True)
class EnginesPoll:
    failure: str | None  # why the cell cannot go on (a replica exited or was replaced); None while all serve
    counters: tuple[dict[str, float], ...]  # each replica's counters ({} where it exports or answered none)

    def work_done(self) -> float | None:
        """Work done by all the replicas together, to tell a busy cell from a hung one (None: not exported)."""
        works = [work for counters in self.counters if (work := work_done(counters or None)) is not None]
        return sum(works) if works else None

    def in_flight(self, replica: int) -> int:
        """The requests replica ``replica`` was running or queueing at this poll."""
        counters = self.counters[replica]
        return int(counters.get(RUNNING, 0.0) + counters.get(WAITING, 0.0))


class CellEngines(Protocol):
    base_url: str  # where the load generator sends every request
    infos: tuple[ReplicaInfo, ...]  # each replica's, by index

    def poll(self) -> EnginesPoll: ...

    def mark(self) -> object:
        """Where each replica's log and trace are now, for ``output_since``."""

    def output_since(self, mark: object, requests: Sequence[RequestRecord]) -> tuple[str, bytes]:
        """The server log text and scheduler trace written since ``mark``, waiting for a trace line of each of
        ``requests`` (what the cell sent) at the replica that served it."""


class OneReplica:
    """A cell's single replica, talked to directly."""

    def __init__(self, replica: Replica):
        self._replica = replica
        self.base_url = replica.info.base_url
        self.infos = (replica.info,)

    def poll(self) -> EnginesPoll:
        replica = self._replica
        failure = None if replica.is_alive() else f"replica exited with code {replica.exit_code} during the cell"
        return EnginesPoll(failure, (read_counters(self.base_url) or {},))

    def mark(self) -> OutputMark:
        return self._replica.mark()

    def output_since(self, mark: OutputMark, requests: Sequence[RequestRecord]) -> tuple[str, bytes]:
        return self._replica.output_since(mark, len(requests))
