"""Continuum's tuning: the TTL of a pin, whose pins a request short of blocks may take, and the extras beyond the
public prototype. A replica reads it from its environment (``KVSWEEP_CONTINUUM``, JSON), where the policy put it."""

from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass

CONFIG_ENV = "KVSWEEP_CONTINUUM"


class TtlMode(str, enum.Enum):
    FIXED = "fixed"
    ADAPTIVE = "adaptive"


class AdmissionRelease(str, enum.Enum):
    """Whose pins a request that cannot get blocks may take."""

    # Only pins of jobs that arrived after it: older jobs keep their place (program-level FCFS), and a new
    # job waits for blocks instead of evicting a job in flight (Continuum's turn-1/turn-2 spike).
    YOUNGER = "younger"
    ALWAYS = "always"  # any pin, youngest first: pins never delay an admission
    # The public prototype's rule: pins give way only when no other request is running (the most recently
    # pinned first); until then new work waits and a running request short of blocks preempts another.
    IDLE = "idle"


@dataclass(frozen=True)
class ContinuumConfig:
    """Tuning of the pin policy; read from the ``KVSWEEP_CONTINUUM`` environment variable (JSON)."""

    ttl_s: float = 2.0  # the public prototype's fixed TTL; also the adaptive mode's first guess
    ttl_mode: TtlMode = TtlMode.FIXED
    adaptive_factor: float = 1.5  # adaptive TTL = factor x the longest gap seen for the job (or overall)
    adaptive_max_s: float = 10.0
    admission_release: AdmissionRelease = AdmissionRelease.YOUNGER
    pinned_first: bool = True  # waiting turns of pinned jobs jump the queue (needs priority scheduling)
    # A new job is admitted only if the blocks left free cover what the pinned jobs are expected to grow to
    # by their last turn, so jobs in flight do not have to take each other's pins (beyond the prototype).
    reserve_for_pinned: bool = True
    # The prototype keeps an expired pin while its job's next turn waits in the queue.
    hold_while_waiting: bool = False

    @classmethod
    def from_env(cls) -> ContinuumConfig:
        raw = json.loads(os.environ.get(CONFIG_ENV) or "{}")
        known = sorted(cls.__dataclass_fields__)
        unknown = set(raw) - set(known)
        if unknown:
            raise ValueError(f"{CONFIG_ENV} has unknown keys {sorted(unknown)}; known: {known}")
        if "ttl_mode" in raw:
            raw["ttl_mode"] = TtlMode(raw["ttl_mode"])
        if "admission_release" in raw:
            raw["admission_release"] = AdmissionRelease(raw["admission_release"])
        return cls(**raw)

    def to_env(self) -> dict[str, str]:
        payload = {key: getattr(value, "value", value) for key, value in self.__dict__.items()}
        return {CONFIG_ENV: json.dumps(payload, sort_keys=True)}
