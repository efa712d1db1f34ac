"""The CPU priority a replica's processes run at.

Ray starts its worker processes at nice 15 (its ``RAY_worker_niceness`` setting) unless the node was started with
another value, and every process a worker starts inherits it: a replica's server (API process, engine core and
its workers), the launcher they fork from, the load generator's client actors. Any process at the default
priority beside them on the node (Ray's own daemons, a driver, another job) then takes the CPU first, and what a
cell measures moves with it: on two cores, with one busy process beside CPU cells under KV pressure, 115 of
Continuum's 252 pins reached their 2 s TTL before the job's next turn came back from a 0.5 s tool call at nice 15
(none at nice 0, none on a quiet machine), and its mean JCT was 73% behind FCFS's at nice 15, 4% at 0
(``benchmarks/worker_niceness.py``, docs/measured.md).

So every actor that runs a server or drives one (a cell's worker, the load's clients, a Serve replica and its
ingress) asks Ray for its worker at the node's own niceness (``at_normal_priority``: Ray adds its 15 at a worker's
start unless the worker's environment says otherwise), on any cluster. The nodes this project starts run all their
workers so (a private local cluster, ``start_workers_at_normal_priority``; the recipes in deploy/), Serve's HTTP
proxy included. Each cell records the niceness its server ran at (``CellConfig.server_niceness``), and the doctor
says when a node itself is niced.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

# Ray's niceness for worker processes, added to the node's: read from a node's environment when it starts (every
# worker), and from an actor's runtime environment when its worker starts (that worker alone).
WORKER_NICENESS_ENV = "RAY_worker_niceness"
NORMAL_NICENESS = 0


def start_workers_at_normal_priority(environ: MutableMapping[str, str] = os.environ) -> None:
    """Before a local Ray node starts from this process (its raylet takes ``environ``): workers at nice 0, unless
    the caller set a niceness of their own."""
    environ.setdefault(WORKER_NICENESS_ENV, str(NORMAL_NICENESS))


def at_normal_priority(options: Mapping[str, object]) -> dict[str, object]:
    """Ray actor ``options`` that start its worker at its node's niceness, without Ray's 15 on top."""
    return {**options, "runtime_env": {"env_vars": {WORKER_NICENESS_ENV: str(NORMAL_NICENESS)}}}


def niceness(pid: int = 0) -> int:
    """The niceness of process ``pid``'s main thread, or with 0 of the calling thread (Linux keeps one per thread, and
    a process or thread starts with that of the thread that made it), as ``ps -o ni`` shows it."""
    return os.getpriority(os.PRIO_PROCESS, pid)


def niced_workers_advice(worker_niceness: int) -> str:
    """What servers and clients started at ``worker_niceness`` (a Ray worker's, or a driver's own) do to what a cell
    measures, and the fix for each."""
    return (f"servers and clients start at nice {worker_niceness}: they get the CPU after any other process on the "
            f"node; start the node's Ray (or, without Ray, the command) at nice {NORMAL_NICENESS}")  # fmt: skip
