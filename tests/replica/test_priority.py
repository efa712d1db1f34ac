"""The CPU priority of a replica's processes: a local cluster starts its workers at nice 0, and the doctor fails a
node whose servers and clients would start niced. (That a cell's server runs at its node's niceness on a cluster
started at Ray's default, as the suite's are, tests/integration/test_cpu_sweep.py checks.)"""

from __future__ import annotations

import os
import threading

from orchestrator.evidence.checks import _priority_check
from orchestrator.replica.priority import WORKER_NICENESS_ENV, start_workers_at_normal_priority


def test_a_local_cluster_starts_its_workers_at_nice_0_unless_the_caller_chose_a_niceness():
    environ = {"PATH": "/usr/bin"}
    start_workers_at_normal_priority(environ)
    assert environ == {"PATH": "/usr/bin", WORKER_NICENESS_ENV: "0"}
    chosen = {WORKER_NICENESS_ENV: "5"}
    start_workers_at_normal_priority(chosen)
    assert chosen == {WORKER_NICENESS_ENV: "5"}


def test_the_doctor_fails_a_node_whose_workers_are_niced_and_says_how_to_start_it():
    checks = []

    def niced_as_ray_starts_its_workers() -> None:
        os.nice(15)  # a thread's own on Linux: this process's other threads keep theirs
        checks.append(_priority_check("cpu"))

    thread = threading.Thread(target=niced_as_ray_starts_its_workers)
    thread.start()
    thread.join()
    (check,) = checks
    assert not check.ok and check.detail.startswith("servers and clients start at nice ")
    assert int(check.detail.split()[6].rstrip(":")) >= 15
    assert check.detail.endswith("start the node's Ray (or, without Ray, the command) at nice 0")
