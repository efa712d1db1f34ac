"""A sweep's GPU budget: device time for all GPU types together, per type, or both (pure).

    --gpu-budget 2h                   two hours over every type the sweep measures
    --gpu-budget H100=2h,H200=30m     per type; a type not named is not measured (its cells stay predicted)
    --gpu-budget 3h,H100=2h           three hours in all, of which the H100s take at most two

A time is a number with a unit: ``s``, ``m`` or ``h``. The CPU engine counts as a type (``cpu=3m``). The time
counted is device time: each attempt's wall time, its server's start included, times the GPUs it holds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from orchestrator.gpus import known_device_names
from orchestrator.inputs.validation import InputError

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}
VALID = "valid: a time such as 2h, 30m or 90s, for all types or per type (H100=2h,H200=30m), comma-separated"


def parse_duration_s(text: str, where: str) -> float:
    """Seconds of ``text`` (``90s``, ``30m``, ``1.5h``); ``InputError`` naming ``where`` otherwise."""
    match = _DURATION.match(text.strip())
    if not match or float(match.group(1)) <= 0:
        raise InputError(f"--gpu-budget {where}: {text!r} is not a positive time; {VALID}")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def format_duration(seconds: float) -> str:
    """``seconds`` as the flag writes it, in the largest unit that keeps it whole (or to a tenth)."""
    for unit in ("h", "m"):
        value = seconds / _UNIT_S[unit]
        if value >= 1 and abs(value * 10 - round(value * 10)) < 1e-9:
            return f"{value:g}{unit}"
    return f"{seconds:.4g}s"


def in_words(seconds: float) -> str:
    """``seconds`` for a reader: 1.6 h, 12.5 min or 40 s."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


@dataclass(frozen=True)
class GpuBudget:
    """Device seconds a run may spend: ``total_s`` over every type (None: no limit over all), and per type."""

    total_s: float | None = None
    by_type: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def parse(cls, text: str) -> GpuBudget:
        total, by_type = None, {}
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if not parts:
            raise InputError(f"--gpu-budget is empty; {VALID}")
        for part in parts:
            if "=" not in part:
                if total is not None:
                    raise InputError(f"--gpu-budget {text!r} gives two times for all types; {VALID}")
                total = parse_duration_s(part, repr(part))
                continue
            gpu, _, duration = (piece.strip() for piece in part.partition("="))
            if gpu not in known_device_names():
                raise InputError(f"--gpu-budget {part!r}: unknown GPU type {gpu!r}; known: {', '.join(known_device_names())}")
            if gpu in by_type:
                raise InputError(f"--gpu-budget {text!r} names {gpu} twice; {VALID}")
            by_type[gpu] = parse_duration_s(duration, repr(part))
        return cls(total, MappingProxyType(by_type))

    def measures(self, gpu: str) -> bool:
        """Whether cells of ``gpu`` get device time: every type under a budget for all, else the types named."""
        return self.total_s is not None or gpu in self.by_type

    def check_types(self, gpus: tuple[str, ...]) -> None:
        """Raises ``InputError`` where the budget names a type the sweep does not have."""
        for gpu in self.by_type:
            if gpu not in gpus:
                raise InputError(f"--gpu-budget names {gpu}, which is not among the sweep's GPU types "
                                 f"({', '.join(gpus)}); valid: one of those")  # fmt: skip

    def __str__(self) -> str:
        parts = [format_duration(self.total_s)] if self.total_s is not None else []
        return ",".join(parts + [f"{gpu}={format_duration(seconds)}" for gpu, seconds in self.by_type.items()])
