"""A watchdog that kills a server's process group when the process that owns the server dies.

The server runs in its own process group so teardown can reach vLLM's engine and worker processes; the
price is that nothing kills that group if its owner (a driver, a Ray actor) is SIGKILLed. The reaper
detaches itself (double fork) so it is nobody's child: Ray kills a dead worker's direct children, and
would take a plain child reaper with it. It polls the owner's pid instead of using PR_SET_PDEATHSIG, which
fires when the *thread* that forked it exits. It exits by itself once the group is gone.

    python -m orchestrator.replica.reaper --group PGID --owner PID
"""

from __future__ import annotations

import argparse
import os
import signal
import time

POLL_S = 0.2


def _reachable(send_signal, target: int) -> bool:
    """Whether a process (``os.kill``) or group (``os.killpg``) exists, probed with signal 0."""
    try:
        send_signal(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch(group: int, owner: int) -> None:
    while _reachable(os.killpg, group):
        if not _reachable(os.kill, owner):
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        time.sleep(POLL_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--group", type=int, required=True)
    parser.add_argument("--owner", type=int, required=True)
    args = parser.parse_args()
    if os.fork():
        os._exit(0)  # the owner reaps this parent at once; the watcher below is re-parented away from it
    os.setsid()
    watch(args.group, args.owner)


if __name__ == "__main__":
    main()
