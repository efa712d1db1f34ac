"""How much of a sweep's wall time is measurement? A sweep of short cells on the real CPU engine.

Runs fcfs and continuum at two loads each (one slot, so four cells one after another: two replica
starts, two reuses after a verified reset) and reports the sweep's wall time against the sum of the
cells' measurement spans (first arrival to last job finish), and the dead time between one cell's last
job and the next cell's first arrival, split by whether the replica was reused or restarted. The last
line is one JSON object.

    python benchmarks/orchestrator_overhead.py [--duration-s 5] [--results-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from orchestrator.cell.spec import EngineKind
from orchestrator.sweep.planning.options import SweepOptions
from orchestrator.sweep.planning.spec import EngineOptions, RunLimits, SweepSpec
from orchestrator.sweep.runtime.driver import run_sweep
from orchestrator.sweep.runtime.tracking import default_tracking_uri
from orchestrator.workload.spec import WorkloadSpec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration-s", type=float, default=5.0, help="arrival window of each cell")
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    results = (args.results_dir or Path(tempfile.mkdtemp(prefix="kvsweep-overhead-"))).absolute()
    spec = SweepSpec(
        name="overhead",
        engine=EngineKind.VLLM,
        gpus=("cpu",),
        policies=("fcfs", "continuum"),
        jps=(1, 2),
        workload=WorkloadSpec(jps=1, duration_s=args.duration_s, scale=0.25),
        engine_options=EngineOptions(num_kv_blocks=2400),
        limits=RunLimits(health_timeout_s=300),
    )
    started = time.monotonic()
    code = run_sweep(spec, SweepOptions(results, default_tracking_uri(results), rerun=True, live=False))
    wall_s = time.monotonic() - started
    if code != 0:
        print(json.dumps({"error": f"sweep exited {code}", "results": str(results)}))
        return 1
    cells = pd.read_parquet(results / "overhead" / "summary.parquet").sort_values("started_unix")
    spans, gaps = [], []
    previous_end = None
    for cell in cells.itertuples():
        jobs = pd.read_parquet(results / "overhead" / "cells" / cell.cell_key / "jobs.parquet")
        span = jobs.finished_at.max() - jobs.arrival_at.min()
        spans.append(span)
        # Dead time into a cell: the driver's gap before it plus the cell's own time outside its
        # measurement span (plan, replica start or reset, draining, collecting the records).
        dead = cell.wall_s - span + (cell.started_unix - previous_end if previous_end is not None else 0.0)
        if previous_end is not None:
            gaps.append({"into": f"{cell.policy} jps={cell.jps:g}", "replica_reused": bool(cell.replica_reused),
                         "dead_s": round(dead, 2)})  # fmt: skip
        previous_end = cell.finished_unix
    reused = [gap["dead_s"] for gap in gaps if gap["replica_reused"]]
    restarted = [gap["dead_s"] for gap in gaps if not gap["replica_reused"]]
    figures = {
        "cells": len(cells),
        "wall_s": round(wall_s, 1),
        "measured_s": round(sum(spans), 1),
        "measured_fraction": round(sum(spans) / wall_s, 3),
        "gap_reuse_s": round(sum(reused) / len(reused), 2) if reused else None,
        "gap_restart_s": round(sum(restarted) / len(restarted), 2) if restarted else None,
        "gaps": gaps,
        "results": str(results),
    }
    print(f"{figures['cells']} cells in {figures['wall_s']} s, {figures['measured_s']} s of it measurement; between "
          f"cells {figures['gap_reuse_s']} s with a reused replica, {figures['gap_restart_s']} s with a restart")  # fmt: skip
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
