"""The simulated request: what the simulator's scheduler, its engine and the mechanisms' hooks all hold of one request,
as vLLM's ``Request`` is to its scheduler and KV connectors. A leaf (it imports nothing of the project), so the
simulator, which takes the mechanisms, and the mechanisms, which are handed its requests, both name it from below.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SharedHold:
    """What a request (then its pin) holds of the shared segments: the keys it references, in prompt order, and
    private copies of blocks it could not use from the cache (past its hit, where another holder caches them)."""

    keys: tuple[str, ...] = ()
    num_private: int = 0


@dataclass(eq=False)
class SimRequest:
    request_id: str
    job_id: str
    job_index: int
    turn: int
    is_last: bool
    prompt_tokens: int
    arrival: float
    output_tokens: int  # the completion's exact length (min_tokens = max_tokens on a real engine)
    shared_blocks: int = 0  # its leading blocks other jobs send too: the system prompt (held all run), or ...
    # ... a replay's declared shared blocks, as the pool's segments: (declared block id, engine blocks), in order
    shared_segments: tuple[tuple[str, int], ...] = ()
    shared_hold: SharedHold = SharedHold()  # the segments it references while admitted
    # Of its job's cached chain, how many blocks its prompt can use (a replay's declared prefix shared with the
    # job's previous request); None: all of them (prompts that grow by appending).
    max_job_hit_blocks: int | None = None
    priority: int = 0
    num_output: int = 0
    num_computed: int = 0
    num_blocks: int = 0  # held by this request, beyond the shared system prompt blocks
    cached_tokens: int | None = None  # prefix hit at first admission (what usage reports)
    saved_tokens: int = 0  # how much of its prompt the CPU tier already has
    ready_at: float = 0.0  # when its asynchronous CPU-tier load completes
    first_token_at: float | None = None
    due_at: float = 0.0  # when the client sent it: the plan's due time (the record's scheduled_at)
    replica: int = 0  # which of the cell's engines its router chose
    in_engine: bool = False
    done: bool = False

    @property
    def num_tokens(self) -> int:
        return self.prompt_tokens + self.num_output

    def sort_key(self) -> tuple[int, float]:
        return self.priority, self.arrival
