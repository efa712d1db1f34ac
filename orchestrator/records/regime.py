"""The KV regime a cell measured (pure): whether its GPU's KV pool held the working set, read from what the run
recorded, not from an estimate made before it.

Where a cell sits depends on the machine: the same load keeps more jobs in flight on a slower engine, so a cell meant to
measure pressure may fit on a fast machine (``sizing.agent.pressure_jps`` puts a load where it cannot). What the cell
did is the evidence. It measured **pressure** when its pool could not hold every job's context, shown by any of:

- its later turns found less than ``KEPT_FLOOR_PCT`` of the prefix their own earlier turns left (evicted and
  recomputed);
- the engine preempted a request (no room to go on);
- a pin gave way to memory pressure (Continuum released a held context to admit other work);
- the CPU tier served a prefix (it holds only what the GPU pool let go).

Otherwise it **fits**. A cell without later turns to judge (one-turn jobs) has no measured regime.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

KEPT_FLOOR_PCT = 90.0  # the prefix a pool that holds everything still misses: partial blocks, a turn's own race


class KvRegime(str, enum.Enum):
    FITS = "fits"
    PRESSURE = "pressure"


@dataclass(frozen=True)
class MeasuredRegime:
    regime: KvRegime
    evidence: tuple[str, ...]  # what showed pressure, in words; empty where the cell fits

    def in_words(self) -> str:
        return self.regime.value + (f" ({', '.join(self.evidence)})" if self.evidence else "")


def measured_regime(prefix_kept_pct: float | None, num_preemptions: float | None = None,
                    pin_gave_way_pct: float | None = None, external_prefix_cache_hits: float | None = None,
                    ) -> MeasuredRegime | None:  # fmt: skip
    """The regime a done cell's summary columns show (module docstring); None where its later turns are unknown."""
    if _missing(prefix_kept_pct):
        return None
    evidence = []
    if prefix_kept_pct < KEPT_FLOOR_PCT:
        evidence.append(f"later turns kept {prefix_kept_pct:.0f}% of their prefix")
    if not _missing(num_preemptions) and num_preemptions > 0:
        evidence.append(f"{num_preemptions:.0f} preemptions")
    if not _missing(pin_gave_way_pct) and pin_gave_way_pct > 0:
        evidence.append(f"{pin_gave_way_pct:.0f}% of pins gave way")
    if not _missing(external_prefix_cache_hits) and external_prefix_cache_hits > 0:
        evidence.append(f"the CPU tier served {external_prefix_cache_hits:,.0f} tokens")
    return MeasuredRegime(KvRegime.PRESSURE if evidence else KvRegime.FITS, tuple(evidence))


def regime_of_row(row) -> MeasuredRegime | None:
    """``measured_regime`` of a summary row (a mapping or a namedtuple with the summary's columns)."""
    value = row.get if hasattr(row, "get") else lambda name: getattr(row, name, None)
    return measured_regime(value("prefix_kept_pct"), value("num_preemptions"), value("pin_gave_way_pct"),
                           value("external_prefix_cache_hits"))  # fmt: skip


def _missing(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
