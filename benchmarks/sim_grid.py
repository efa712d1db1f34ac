"""How long does the simulator take for the whole source study? The full ``large_dram`` grid in it.

Two numbers for the 60 cells (H200, H100, A100, L40S x fcfs, continuum, lmcache x JPS 1-15; 45 s
arrival windows; scale 1.0; Llama-3.1-8B):

- ``engine``: every cell simulated through the cell worker (records, trace and configuration built as
  for a sweep) in a pool of ``--processes`` processes; wall time, and the slowest cell.
- ``sweep``: ``sweeps/large_dram.py --engine sim`` through the driver on a local Ray cluster, with MLflow
  tracking, parquet files and the HTML report; wall time (skip with ``--no-sweep``).

The last line is one JSON object.

    python benchmarks/sim_grid.py [--processes 2] [--no-sweep] [--results-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from orchestrator.cell.spec import CellSpec, EngineKind
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.options import SweepOptions
from orchestrator.sweep.runtime.driver import run_sweep
from orchestrator.sweep.runtime.tracking import default_tracking_uri
from orchestrator.sweep.runtime.worker import CellWorker
from orchestrator.sweeps.large_dram import SPEC

GRID = SPEC.model_copy(update={"engine": EngineKind.SIM})


def _simulate(cell: CellSpec) -> tuple[str, float, int]:
    started = time.perf_counter()
    outcome = CellWorker("benchmark").run(cell, GRID.limits)
    return cell.label, time.perf_counter() - started, len(outcome.requests)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--no-sweep", action="store_true", help="only the simulator, not the sweep around it")
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    cells = expand(GRID)
    started = time.perf_counter()
    with ProcessPoolExecutor(args.processes) as pool:
        timings = list(pool.map(_simulate, cells))
    engine_wall = time.perf_counter() - started
    slowest = max(timings, key=lambda timing: timing[1])
    requests = sum(timing[2] for timing in timings)
    print(f"engine: {len(cells)} cells, {requests:,} requests in {engine_wall:.1f} s on {args.processes} processes; "
          f"median cell {statistics.median(t[1] for t in timings):.2f} s, slowest {slowest[1]:.2f} s ({slowest[0]})")  # fmt: skip
    result = {"cells": len(cells), "requests": requests, "processes": args.processes, "engine_wall_s": round(engine_wall, 2),
              "slowest_cell_s": round(slowest[1], 2), "slowest_cell": slowest[0]}  # fmt: skip
    if not args.no_sweep:
        results = (args.results_dir or Path(tempfile.mkdtemp(prefix="kvsweep-simgrid-"))).absolute()
        options = SweepOptions(results_dir=results, tracking_uri=default_tracking_uri(results), live=False,
                               progress_interval_s=30, rerun=True)  # fmt: skip
        started = time.perf_counter()
        code = run_sweep(GRID, options)
        sweep_wall = time.perf_counter() - started
        print(f"sweep: sweeps/large_dram.py --engine sim, {len(cells)} cells with tracking and report in {sweep_wall:.1f} s "
              f"(exit {code}); results {results / GRID.name}")  # fmt: skip
        result |= {"sweep_wall_s": round(sweep_wall, 2), "sweep_exit": code, "results": str(results / GRID.name)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
