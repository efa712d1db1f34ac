"""Tensor-parallel cells packed onto multi-GPU nodes: a fake-engine sweep of TP-1 and TP-4 cells of a 70B model on a
local cluster of 8-GPU H100 nodes (declared GPUs: this machine has none), then its report. Prints, per node, the
most GPUs its cells held at once (from the GPUs each cell's worker was given) against the node's count, and the
report's mean job time per policy for each degree. The engine is the fake one, so the times are the orchestration's,
not a measurement.

    python benchmarks/tp_packing.py [--nodes 2] [--tp 1,4] [--policies fcfs,continuum] [--jps 2,3,5] [--keep DIR]

The last line is one JSON object; the exit status is 1 when a cell is not done or a node held more GPUs than it has.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from orchestrator.paths import PROJECT_ROOT
from orchestrator.replica.server import free_port

GPU = "H100"
GPUS_PER_NODE = 8
MODEL = "llama-3.1-70b"


def peak_gpus(rows: pd.DataFrame) -> dict[str, int]:
    """Per node, the most distinct GPUs its cells held at once (each cell holds ``gpu_ids`` from start to finish)."""
    peaks = {}
    for node, cells in rows.groupby("node_id"):
        peaks[node] = max(len({gpu for ids in cells[(cells.started_unix <= moment) & (cells.finished_unix > moment)]
                               .gpu_ids for gpu in ids.split(",")}) for moment in cells.started_unix)  # fmt: skip
    return peaks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2, help=f"{GPU} nodes of {GPUS_PER_NODE} GPUs")
    parser.add_argument("--tp", default="1,4")
    parser.add_argument("--policies", default="fcfs,continuum")
    parser.add_argument("--jps", default="2,3,5")
    parser.add_argument("--keep", type=Path, help="keep the results and the sweep's log here")
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error(f"--nodes must be at least 1, got {args.nodes}")

    from ray.cluster_utils import Cluster

    work = args.keep or Path(tempfile.mkdtemp(prefix="kvsweep-tp-packing-"))
    work.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                                                            "dashboard_agent_listen_port": free_port()})  # fmt: skip
    try:
        for _ in range(args.nodes):
            cluster.add_node(num_cpus=1, num_gpus=GPUS_PER_NODE, memory=32 * 10**9, resources={f"accelerator_type:{GPU}": 1},
                             dashboard_agent_listen_port=free_port())  # fmt: skip
        started = time.monotonic()
        command = [sys.executable, str(PROJECT_ROOT / "sweeps" / "cpu_tiny.py"), "--engine", "fake", "--gpus", GPU,
                   "--model", MODEL, "--weights", "dummy", "--tp", args.tp, "--policies", args.policies, "--jps",
                   args.jps, "--duration-s", "3", "--scale", "0.05", "--tool-time-s", "0.1", "--client-actors", "0",
                   "--ray-address", cluster.address, "--results-dir", str(work / "results")]  # fmt: skip
        with open(work / "sweep.log", "w") as log:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode
        wall_s = time.monotonic() - started
    finally:
        cluster.shutdown()
    sweep_dir = work / "results" / "cpu_tiny"
    rows = pd.read_parquet(sweep_dir / "summary.parquet")
    peaks = peak_gpus(rows[rows.status == "done"])
    print(f"{len(rows)} cells on {args.nodes} {GPU} nodes of {GPUS_PER_NODE} GPUs in {wall_s:.0f} s (exit {code}); "
          f"{(rows.status == 'done').sum()} done")  # fmt: skip
    print("node      cells  most GPUs held at once")
    for node, peak in peaks.items():
        print(f"{node[:8]}  {(rows.node_id == node).sum():>5}  {peak} of {GPUS_PER_NODE}")
    tables = {}
    for degree in sorted(rows.tp.unique()):
        name = f"jct_{GPU.lower()}" + (f"-tp{degree}" if degree > 1 else "")
        table = pd.read_csv(sweep_dir / "report" / "tables" / f"{name}.csv")
        tables[int(degree)] = table.to_dict(orient="records")
        print(f"\nTP {degree}: mean job time (s) per policy, from the report's table {name}\n{table.to_string(index=False)}")
    print(f"\nreport: {sweep_dir / 'report' / 'report.html'}; sweep log: {work / 'sweep.log'}")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    ok = code == 0 and (rows.status == "done").all() and all(peak <= GPUS_PER_NODE for peak in peaks.values())
    print(json.dumps({"exit_code": code, "wall_s": round(wall_s, 1), "cells": len(rows),
                      "done": int((rows.status == "done").sum()), "peak_gpus": list(peaks.values()),
                      "jct_by_tp": tables}))  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
