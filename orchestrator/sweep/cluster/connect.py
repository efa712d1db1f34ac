"""Connecting to Ray without hanging: an address that nobody answers at is one line, not minutes of retries.

``ray.init()`` with no address joins the cluster recorded in Ray's temp dir by the last ``ray start``
(``ray_current_cluster``). A local cluster that died without ``ray stop`` leaves its address there, and
``ray.init()`` then retries it for minutes (and honours SIGTERM only after ~30 s). So: an address given
by flag or ``RAY_ADDRESS`` must answer within seconds or the sweep stops with one line; a recorded local
cluster that does not answer is passed over, with a note, for a fresh local one.

A cluster is joined with whatever authentication it uses (``sweep.cluster.auth``); a new local one keeps Ray's
default, token authentication, and starts its workers at nice 0 (``replica.priority``).
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from orchestrator.inputs.validation import InputError
from orchestrator.replica.priority import start_workers_at_normal_priority
from orchestrator.sweep.cluster.auth import find_token, join_in_the_clusters_mode, turn_token_mode_on

CONNECT_TIMEOUT_S = 3.0


def connect_ray(address: str | None) -> None:
    """``ray.init`` for the driver: ``address`` (or ``RAY_ADDRESS``), else a live recorded local cluster,
    else a new local one."""
    import ray

    if ray.is_initialized():
        return
    chosen = address or os.environ.get("RAY_ADDRESS") or None
    given_as = "--ray-address" if address else "RAY_ADDRESS"
    if chosen:
        joined = _running_cluster(chosen, given_as)
    else:
        joined, given_as = _recorded_local_cluster(), "the local Ray cluster on record"
        if joined and not _answers(joined):
            print(
                f"note: the local Ray cluster recorded at {joined} (Ray's ray_current_cluster file) is not running; "
                "starting a fresh local one (`ray stop` clears the record)",
                file=sys.stderr,
                flush=True,
            )
            chosen, joined = "local", None
    if joined:
        _join_with_its_authentication(joined, given_as)
    else:
        start_workers_at_normal_priority()
    ray.init(address=chosen, include_dashboard=False, log_to_driver=False, logging_level="ERROR")


def _join_with_its_authentication(address: str, given_as: str) -> None:
    if not address.startswith("ray://"):
        join_in_the_clusters_mode(address, given_as)
    elif "RAY_AUTH_MODE" not in os.environ and find_token(os.environ, Path.home()):
        # A Ray Client server cannot be asked as a GCS can: send the token there is (one it does not need is ignored).
        turn_token_mode_on()


def _running_cluster(address: str, source: str) -> str | None:
    """The running cluster ``address`` names (``auto``: the recorded local one; ``local``: none, a new one starts),
    checked to answer."""
    if address == "local":
        return None
    if address == "auto":
        resolved = _recorded_local_cluster()
        if not (resolved and _answers(resolved)):
            raise InputError(f"{source} auto: no running local Ray cluster is recorded on this machine; start one with "
                             "`ray start --head` or leave the address out to start a private one")  # fmt: skip
        return resolved
    if not _answers(address):
        raise InputError(
            f"{source} {address}: no Ray cluster answers there within {CONNECT_TIMEOUT_S:g} s; valid: the address of a "
            "running cluster's head (HOST:6379 or ray://HOST:10001), 'auto', or none to start a local cluster"
        )
    return address


def _host_port(address: str) -> tuple[str, int] | None:
    bare = address.split("://", 1)[-1].rstrip("/")
    host, _, port = bare.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        return None


def _answers(address: str) -> bool:
    target = _host_port(address)
    if target is None:
        return False
    try:
        with socket.create_connection(target, timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def _recorded_local_cluster() -> str | None:
    from ray._private.utils import read_ray_address

    return read_ray_address() or None
