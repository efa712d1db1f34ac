"""The CPU priority a replica's processes run at.

Ray starts its worker processes at nice 15 (its ``RAY_worker_niceness`` setting) unless the node was started with
another value, and every process a worker starts inherits it: a replica's server (API process, engine core and
its workers), the launcher they fork from, the load generator's client actors. Any process at the default
priority beside them on the node (Ray's own daemons, a driver, another job) then takes the CPU first, and what a
cell measures moves with it: on two cores, with one busy process beside CPU cells under KV pressure, 44 of
Continuum's 252 pins reached their 2 s TTL before the job's next turn came back from a 0.5 s tool call at nice 15
(19 at nice 0, none on a quiet machine), and its mean JCT was 16% behind FCFS's at nice 15, 2% ahead at 0
(``benchmarks/worker_niceness.py``, docs/measured.md).

So the nodes this project starts run their workers at nice 0: a private local cluster (``start_workers_at_normal_
priority`` before it starts) and the recipes (Slurm, KubeRay, the autoscaler's YAML). Each cell records the
niceness its server ran at (``CellConfig.server_niceness``), and the doctor says when a node's workers are niced.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

# Read by the raylet when a node starts: the niceness of every worker process it starts.
WORKER_NICENESS_ENV = "RAY_worker_niceness"
NORMAL_NICENESS = 0


def start_workers_at_normal_priority(environ: MutableMapping[str, str] = os.environ) -> None:
    """Before a local Ray node starts from this process (its raylet takes ``environ``): workers at nice 0, unless
    the caller set a niceness of their own."""
    environ.setdefault(WORKER_NICENESS_ENV, str(NORMAL_NICENESS))


def niceness(pid: int = 0) -> int:
    """The niceness of process ``pid`` (0: this one), as ``ps -o ni`` shows it."""
    return os.getpriority(os.PRIO_PROCESS, pid)


def niced_workers_advice(worker_niceness: int) -> str:
    """What servers and clients started at ``worker_niceness`` (a Ray worker's, or a driver's own) do to what a cell
    measures, and the fix for each."""
    return (f"servers and clients start at nice {worker_niceness}: they get the CPU after any other process on the "
            f"node; on a Ray cluster start the node with {WORKER_NICENESS_ENV}={NORMAL_NICENESS} "
            f"(`{WORKER_NICENESS_ENV}={NORMAL_NICENESS} ray start ...`, as the recipes in deploy/ do), elsewhere run "
            f"the command at nice {NORMAL_NICENESS}")  # fmt: skip
