"""The routers: which replica of a cell serves a request (pure; the simulator and the Ray Serve request router both
call ``Router.choose``).

A router sees the request (its job and its prompt's block hashes) and the replicas it may pick from with their load:
the requests each has in flight. Four rules, as the studies that compare them name them:

- round-robin: the candidates in turn, whatever they hold;
- least-loaded: power of two choices, Ray Serve's default: two candidates drawn at random, the less loaded wins;
- session-affinity: a job's turns go to its home replica, chosen least loaded at its first turn. Fallback: when the
  home is overloaded (``LOAD_SLACK`` requests or ``LOAD_SLACK_SHARE`` above the least loaded candidate) or gone,
  the turn goes to the least loaded candidate, which becomes the job's home;
- prefix-aware: the candidate believed to hold the longest prefix of the prompt (``PrefixIndex``, from the block
  hashes the router routed there), among those not overloaded, ties to the less loaded; when even that one holds
  less than ``MIN_MATCH_SHARE`` of the prompt's blocks, the least loaded of them.

Ties among equally loaded candidates go to the lowest index, so that a run is the same every time.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from orchestrator.inputs.validation import Registry
from orchestrator.routing.prefix_index import PrefixIndex

# How far above the least loaded candidate a replica may be before it counts as overloaded: ``LOAD_SLACK`` requests in
# flight, or ``LOAD_SLACK_SHARE`` of the least loaded one's, whichever is more. Session affinity and prefix awareness
# then give up locality for load, as llm-d's and SGLang's routers do with their balance thresholds.
LOAD_SLACK = 4
LOAD_SLACK_SHARE = 0.25
# The share of a prompt's blocks a replica must be believed to hold for prefix-aware to prefer it over the least loaded
# (SGLang's cache-aware router defaults to the same half): a system prompt every job shares does not draw them all.
MIN_MATCH_SHARE = 0.5


class RouterKind(str, enum.Enum):
    ROUND_ROBIN = "round-robin"
    LEAST_LOADED = "least-loaded"
    SESSION_AFFINITY = "session-affinity"
    PREFIX_AWARE = "prefix-aware"


@dataclass(frozen=True)
class RouteRequest:
    job_id: str
    block_hashes: tuple[Hashable, ...] = ()  # chained hashes of the prompt's full blocks, first block first


@dataclass(frozen=True)
class RouterSetup:
    """What a router is built with: the cell's replica count, the seed that draws least-loaded's pairs, and what
    prefix-aware believes one replica can hold (its KV pool, in blocks; None: unbounded)."""

    num_replicas: int
    seed: int = 0
    capacity_blocks: int | None = None


class Router:
    """One cell's router. ``choose`` is called once per request, in send order, with the candidates' loads (replica
    index -> requests in flight), and returns the chosen index; a router may remember what it chose."""

    kind: ClassVar[RouterKind]
    reads_prefix: ClassVar[bool] = False  # whether ``choose`` reads the request's block hashes (else they may be empty)

    def __init__(self, setup: RouterSetup):
        self.setup = setup

    def choose(self, request: RouteRequest, loads: Mapping[int, int]) -> int:
        raise NotImplementedError


def least_loaded(loads: Mapping[int, int]) -> int:
    return min(loads, key=lambda replica: (loads[replica], replica))


def _overloaded(replica: int, loads: Mapping[int, int]) -> bool:
    lightest = min(loads.values())
    return loads[replica] > lightest + max(LOAD_SLACK, LOAD_SLACK_SHARE * lightest)


class RoundRobin(Router):
    kind = RouterKind.ROUND_ROBIN

    def __init__(self, setup: RouterSetup):
        super().__init__(setup)
        self._last = -1

    def choose(self, request: RouteRequest, loads: Mapping[int, int]) -> int:
        candidates = sorted(loads)
        self._last = next((replica for replica in candidates if replica > self._last), candidates[0])
        return self._last


class LeastLoaded(Router):
    kind = RouterKind.LEAST_LOADED

    def __init__(self, setup: RouterSetup):
        super().__init__(setup)
        self._rng = random.Random(setup.seed)

    def choose(self, request: RouteRequest, loads: Mapping[int, int]) -> int:
        candidates = sorted(loads)
        if len(candidates) == 1:
            return candidates[0]
        first, second = self._rng.sample(candidates, 2)
        return second if loads[second] < loads[first] else first


class SessionAffinity(Router):
    kind = RouterKind.SESSION_AFFINITY

    def __init__(self, setup: RouterSetup):
        super().__init__(setup)
        self._home: dict[str, int] = {}

    def choose(self, request: RouteRequest, loads: Mapping[int, int]) -> int:
        home = self._home.get(request.job_id)
        if home is None or home not in loads or _overloaded(home, loads):
            home = self._home[request.job_id] = least_loaded(loads)
        return home


class PrefixAware(Router):
    kind = RouterKind.PREFIX_AWARE
    reads_prefix = True

    def __init__(self, setup: RouterSetup):
        super().__init__(setup)
        self._indexes = [PrefixIndex(setup.capacity_blocks) for _ in range(setup.num_replicas)]

    def choose(self, request: RouteRequest, loads: Mapping[int, int]) -> int:
        eligible = {replica: load for replica, load in loads.items() if not _overloaded(replica, loads)}
        matched = {replica: self._indexes[replica].num_matched(request.block_hashes) for replica in eligible}
        best = min(eligible, key=lambda replica: (-matched[replica], eligible[replica], replica))
        share = matched[best] / len(request.block_hashes) if request.block_hashes else 0.0
        chosen = best if share >= MIN_MATCH_SHARE else least_loaded(eligible)
        self._indexes[chosen].add(request.block_hashes)
        return chosen


ROUTERS: Registry[type[Router]] = Registry(
    "router", {router.kind.value: router for router in (RoundRobin, LeastLoaded, SessionAffinity, PrefixAware)})


def make_router(kind: RouterKind | str, setup: RouterSetup) -> Router:
    """The router named ``kind``; an unknown name raises with the valid ones."""
    router = ROUTERS[getattr(kind, "value", kind)]
    if setup.num_replicas < 1:
        raise ValueError(f"a cell has at least one replica, not {setup.num_replicas}")
    return router(setup)
