"""Capacity under an SLO on the real CPU engine: does the capacity the search reports meet the SLO when measured, and
does a load 25% above it not? fcfs and continuum on the tiny model (sweeps/cpu_tiny.py's workload and pool).

    python benchmarks/capacity_cpu.py [--results-dir DIR] [--slo jct_p90=20s] [--policies fcfs,continuum]
        [--duration-s 20] [any flag of sweeps/capacity.py]

Runs ``sweeps/capacity.py --gpu cpu --confirm``: the simulator, profiled on this machine by one real cell, finds
each policy's capacity; each is then measured on the real engine at itself and 1.25 times it, walking to the
measured capacity where they disagree, and 1.25 times the measured capacity is measured too. Prints one row per
policy, the whole run's time, and a last line of JSON. Every load is an ordinary cell: a re-run with the same
flags measures nothing again. The CPU engine's speed is the machine's: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

from orchestrator.sweeps.capacity import main as capacity_main

SWEEP = "capacity-cpu"
DEFAULTS = ["--gpu", "cpu", "--confirm", "--jps-min", "0.5", "--jps-max", "8", "--resolution", "0.25"]


def holds(row) -> bool:
    """The reported (measured) capacity met the SLO on the real engine, and 1.25 times it did not."""
    return row.vllm_at_measured_capacity == "met" and row.vllm_at_measured_above not in ("met", "not measured")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results-dir", type=Path, default=Path("results"))
    p.add_argument("--slo", default="jct_p90=20s")
    p.add_argument("--policies", default="fcfs,continuum")
    p.add_argument("--duration-s", default="20")
    args, rest = p.parse_known_args(argv)
    started = time.monotonic()
    code = capacity_main(["--results-dir", str(args.results_dir), "--slo", args.slo, "--policies", args.policies,
                          "--duration-s", args.duration_s, *DEFAULTS, *rest])  # fmt: skip
    wall_s = time.monotonic() - started
    if code != 0:
        return code
    found = pd.read_csv(args.results_dir / SWEEP / "capacity.csv")
    found["holds"] = [holds(row) for row in found.itertuples()]
    shown = ["policy", "capacity_jps", "vllm_at_capacity", "above_jps", "vllm_at_above", "vllm_capacity_jps",
             "vllm_at_measured_capacity", "vllm_measured_above_jps", "vllm_at_measured_above", "holds"]  # fmt: skip
    print(f"\nCapacity at {args.slo} on the CPU engine: simulated, then measured ({wall_s / 60:.1f} min in all)")
    print(found[shown].to_string(index=False))
    print(json.dumps({"slo": args.slo, "wall_s": round(wall_s, 1), "rows": found[shown].to_dict("records")}, default=str))
    return 0 if found.holds.all() else 1


if __name__ == "__main__":
    sys.exit(main())
