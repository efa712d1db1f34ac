"""A watchdog that kills a server's process group when the process that owns the server dies.

The server runs in its own process group so teardown can reach vLLM's engine and worker processes; the
price is that nothing kills that group if its owner (a driver, a Ray actor) is SIGKILLed. The reaper is a
small child of the owner, outside the group, that notices it was re-parented and then kills the group.
It polls instead of using PR_SET_PDEATHSIG, which fires when the *thread* that forked it exits, and Ray may
run actor methods on short-lived threads.

    python -m orchestrator.replica.reaper --group PGID --owner PID
"""

from __future__ import annotations

import argparse
import os
import signal
import time

POLL_S = 0.2


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch(group: int, owner: int) -> None:
    # SIGTERM to the reaper is the owner's orderly "stop watching".
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while _group_alive(group):
        if os.getppid() != owner:
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
    watch(args.group, args.owner)


if __name__ == "__main__":
    main()
