"""Routers and Serve's cost on the real CPU engine: runs ``sweeps/routing_cpu.py`` and prints, per policy, one replica
talked to directly, one behind Ray Serve, and two behind session affinity and round-robin.

    python benchmarks/serve_routing.py [--results-dir DIR] [any sweep flag, e.g. --jps 2 --duration-s 10]

Columns: the share of their best possible prefix that turns after a job's first found in cache, the share of those
turns that went to another replica than their previous turn, time to first token and a turn's latency (both from
the turn's scheduled time, medians), mean job completion time, and expired pins (Continuum's pins that ended
unused). Then Serve's cost: each statistic through Serve with one replica over the same cell direct, from the same
run. The last line is one JSON object. A re-run fills only the cells that are missing.
"""

from __future__ import annotations

import json
import sys

import pandas as pd

from orchestrator.records.cell import CellStatus
from orchestrator.records.layout import SweepFiles
from orchestrator.sweep.cli import parser, prepare, run_with_one_line_errors
from orchestrator.sweep.runtime.driver import run_sweep
from sweeps.routing_cpu import SPEC

COLUMNS = ("prefix_kept_pct", "turns_moved_pct", "ttft_p50_ms", "turn_p50_ms", "jct_mean_s", "pin_expired_pct")
COSTS = ("ttft_p50_ms", "turn_p50_ms", "jct_mean_s")


def arm_of(cell) -> str:
    if not isinstance(cell.router, str):  # no router: one replica, talked to directly
        return "direct x1"
    return f"{'serve' if cell.replicas == 1 else cell.router} x{int(cell.replicas)}"


def cell_row(files: SweepFiles, cell) -> dict:
    requests = pd.read_parquet(files.cell(cell.cell_key).requests)
    ok = requests[requests.status == "ok"]
    return {
        "policy": cell.policy, "jps": cell.jps, "arm": arm_of(cell),
        "prefix_kept_pct": cell.prefix_kept_pct, "turns_moved_pct": cell.turns_moved_pct,
        "ttft_p50_ms": 1000 * (ok.first_token_at - ok.scheduled_at).median(),
        "turn_p50_ms": 1000 * (ok.finished_at - ok.scheduled_at).median(),
        "jct_mean_s": cell.jct_mean_s, "pin_expired_pct": cell.pin_expired_pct,
    }  # fmt: skip


def table(files: SweepFiles) -> pd.DataFrame:
    summary = pd.read_parquet(files.summary)
    done = summary[summary.status == CellStatus.DONE.value]
    return pd.DataFrame([cell_row(files, cell) for cell in done.itertuples()]).sort_values(["policy", "jps", "arm"])


def serve_cost(rows: pd.DataFrame) -> pd.DataFrame:
    """Each cost statistic through Serve with one replica over the same cell direct."""
    keyed = rows.set_index(["policy", "jps", "arm"])
    ratios = []
    for policy, jps in sorted({(row.policy, row.jps) for row in rows.itertuples()}):
        if (policy, jps, "direct x1") in keyed.index and (policy, jps, "serve x1") in keyed.index:
            direct, served = keyed.loc[(policy, jps, "direct x1")], keyed.loc[(policy, jps, "serve x1")]
            ratios.append({"policy": policy, "jps": jps, **{f"{name} serve/direct": served[name] / direct[name]
                                                             for name in COSTS}})  # fmt: skip
    return pd.DataFrame(ratios)


def main(argv: list[str] | None = None) -> int:
    args = parser(SPEC).parse_args(argv)
    spec, options = prepare(SPEC, args)
    code = run_sweep(spec, options)
    files = SweepFiles(options.results_dir / spec.name)
    rows = table(files)
    costs = serve_cost(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.3g}".format):
        print(rows.to_string(index=False))
        print()
        print(costs.to_string(index=False) if len(costs) else "no Serve/direct pair is done")
    print(json.dumps({"sweep_exit": code, "cells": rows.to_dict("records"), "serve_cost": costs.to_dict("records")}))
    return code


if __name__ == "__main__":
    sys.exit(run_with_one_line_errors(main))
