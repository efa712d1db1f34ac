"""Names as older results wrote them, and the names they have now, so that every result directory is read whatever
version of the project wrote it (pure).

One rule for counts: ``num_*``, as vLLM and the models' configurations name theirs. Results written before the rule
applied everywhere named some counts ``n_*``; a summary row once had ``t8_*`` for its last turn's columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import pandas as pd

_COUNTS = ("jobs", "completed", "timeouts", "preemptions", "jobs_dropped", "pins", "evicted_blocks", "errors",
           "trials", "preemptions_sim", "preemptions_real")  # fmt: skip
RENAMED = {f"n_{name}": f"num_{name}" for name in _COUNTS} | {"t8_mean_s": "t_last_mean_s",
                                                                "t8_over_t1": "t_last_over_t1"}  # fmt: skip

V = TypeVar("V")


def current_names(payload: Mapping[str, V]) -> dict[str, V]:
    """``payload`` with every old name replaced by its current one."""
    return {RENAMED.get(name, name): value for name, value in payload.items()}


def read_summary(path: Path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """A sweep's ``summary.parquet`` with its columns under their current names (``columns``: only those)."""
    frame = pd.read_parquet(path).rename(columns=RENAMED)
    return frame if columns is None else frame[list(columns)]
