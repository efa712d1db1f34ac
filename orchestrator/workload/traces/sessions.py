"""Sessions recovered from prefix chains, for traces that log requests without saying whose they are (pure).

A multi-turn session sends, at each turn, its whole conversation so far: the next turn's prompt starts with the
previous turn's prompt. With chained block ids (an id names its block and everything before it, as Mooncake's
``hash_ids`` and vLLM's prefix cache do), "starts with" is one lookup: request B continues a session whose latest
request ended in block ``x`` when ``x`` is among B's own ids, at the same position. The rule:

- B continues the session whose latest request's full blocks are the longest prefix of B's, provided that prefix
  is at least ``min_shared`` of B's blocks (a request that shares only a system prompt or a tool list with another
  is not its next turn);
- only a session's latest request can be continued: a request that extends an earlier turn of a session that has
  moved on (a retry, a branch) starts a session of its own;
- a request with no full block continues nothing; equal prompts continue the most recent session that ended so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

DEFAULT_MIN_SHARED = 0.5


def recover_sessions(chains: Sequence[tuple[str, ...]], min_shared: float = DEFAULT_MIN_SHARED) -> list[list[int]]:
    """The sessions of requests whose full-block ids are ``chains`` (in arrival order): each a list of indices into
    ``chains``, in order; sessions ordered by their first request."""
    if not 0 < min_shared <= 1:
        raise ValueError(f"min_shared {min_shared!r}; valid: a share in (0, 1]")
    sessions: list[list[int]] = []
    latest_ending_in: dict[str, int] = {}  # a session's latest request's last block -> the session
    for index, chain in enumerate(chains):
        session = _continued(chain, latest_ending_in, min_shared)
        if session is None:
            session = len(sessions)
            sessions.append([index])
        else:
            del latest_ending_in[chains[sessions[session][-1]][-1]]
            sessions[session].append(index)
        if chain:
            latest_ending_in[chain[-1]] = session
    return sessions


def _continued(chain: tuple[str, ...], latest_ending_in: dict[str, int], min_shared: float) -> int | None:
    shortest = max(1, math.ceil(min_shared * len(chain)))
    for length in range(len(chain), shortest - 1, -1):
        session = latest_ending_in.get(chain[length - 1])
        if session is not None:
            return session
    return None


def describe_sessions(sessions: Sequence[Sequence[int]], min_shared: float) -> str:
    """One line for a converted trace's header: how many sessions were found, of what lengths, by which rule."""
    lengths = sorted(len(session) for session in sessions if len(session) > 1)
    rule = (f"recovered from the block chains (a request whose blocks start with a session's latest prompt, for "
            f"{min_shared:.0%} of its blocks or more, is that session's next turn)")  # fmt: skip
    total = sum(len(session) for session in sessions)
    if not lengths:
        return f"{rule}: none found; each of the {total} requests is a job of one turn"
    return (f"{rule}: {len(lengths)} sessions of 2 turns or more (median {statistics.median(lengths):g}, "
            f"max {lengths[-1]}) hold {sum(lengths)} of the {total} requests; the rest are jobs of one turn")
