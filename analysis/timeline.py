"""A cell's engine steps over time, binned: a bounded number of points per replica whatever the number of steps
(an hour on eight replicas is millions), read from the trace file a row group at a time. The report draws these,
never the steps themselves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from orchestrator.records.scheduler_trace_file import step_batches, time_range

NUM_BINS = 300
_COLUMNS = ("t", "replica", "running", "waiting", "free_blocks", "pinned_blocks")
_PARTIAL = {"steps": "sum", "running_sum": "sum", "waiting": "max", "free_blocks": "min", "pinned_blocks": "max"}


def step_bins(path: Path, num_bins: int = NUM_BINS) -> pd.DataFrame:
    """Per replica (0 in a cell of one) and time bin, in order: ``seconds`` (the bin's start since the trace's first
    event), the steps in it, their mean batch size (``running``), the most requests waiting, the fewest free and the
    most pinned KV blocks. Empty when the trace has no steps."""
    span = _span(path)
    if span is None:
        return pd.DataFrame(columns=["replica", "seconds", "steps", "running", "waiting", "free_blocks",
                                     "pinned_blocks"])  # fmt: skip
    first, last = span
    width = max(last - first, 1e-9) / num_bins
    partials = []
    for steps in step_batches(path, _COLUMNS):
        if not len(steps):
            continue
        bins = np.minimum(((steps.t.to_numpy(dtype=float) - first) / width).astype(np.int64), num_bins - 1)
        replica = steps.replica.fillna(0).astype(int) if "replica" in steps else 0
        frame = pd.DataFrame({"replica": replica, "bin": bins, "steps": 1, "running_sum": steps.running,
                              "waiting": steps.waiting, "free_blocks": steps.free_blocks,
                              "pinned_blocks": steps.pinned_blocks})  # fmt: skip
        partials.append(frame.groupby(["replica", "bin"]).agg(_PARTIAL))
    binned = pd.concat(partials).groupby(level=["replica", "bin"]).agg(_PARTIAL).reset_index()
    binned.insert(1, "seconds", binned.pop("bin") * width)
    binned.insert(3, "running", binned.pop("running_sum") / binned.steps)
    return binned


def _span(path: Path) -> tuple[float, float] | None:
    """The trace's first and last time: from the parquet file's statistics, or a pass over its steps."""
    if Path(path).suffix == ".parquet":
        span = time_range(path)
        if span is not None:
            return span
    times = [steps.t for steps in step_batches(path, ("t",)) if len(steps)]
    if not times:
        return None
    every = pd.concat(times)
    return float(every.min()), float(every.max())
