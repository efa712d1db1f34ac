"""Routers and Serve's cost on the real CPU engine: runs ``sweeps/routing_cpu.py`` and prints, per policy, one replica
talked to directly, one behind Ray Serve, and two behind session affinity and round-robin.

    python benchmarks/serve_routing.py [--results-dir DIR] [--simulate] [any sweep flag, e.g. --jps 2 --duration-s 10]

Columns: the share of their best possible prefix that turns after a job's first found in cache, the share of those
turns that went to another replica than their previous turn, time to first token and a turn's latency (both from
the turn's scheduled time, medians), mean job completion time, and expired pins (Continuum's pins that ended
unused). Then Serve's cost: each statistic through Serve with one replica over the same cell direct, from the same
run. The last line is one JSON object. A re-run fills only the cells that are missing.

``--simulate`` checks the routed simulator against these cells: it measures the CPU engine's profile (three trials of
one real cell, ``orchestrator/sweep/runtime/profiling.py``), simulates the same grid from it (same schedules, same
routers, same pool per replica) and prints each statistic real against simulated. The simulator has no Serve and
gives each replica the whole machine, while here two replicas and Serve share two cores: the routing statistics
(prefix kept, turns moved, pins expired) are what it should match; its times are the machine's best case.
"""

from __future__ import annotations

import json
import sys

import pandas as pd

from orchestrator.cell.spec import EngineKind
from orchestrator.cli.sweep import parser, prepare, run_with_one_line_errors
from orchestrator.records.cell import CellStatus
from orchestrator.records.layout import SweepFiles
from orchestrator.records.names import read_summary
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.sweep.runtime.driver import run_sweep
from orchestrator.sweep.runtime.profiling import measure_cpu_profile
from orchestrator.sweeps.routing_cpu import SPEC

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
    summary = read_summary(files.summary)
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


def real_against_simulated(real: pd.DataFrame, simulated: pd.DataFrame) -> pd.DataFrame:
    """Each arm's statistics measured and simulated side by side, with the simulated JCT over the measured."""
    keys = ["policy", "jps", "arm"]
    both = real.merge(simulated, on=keys, suffixes=(" real", " sim"))
    both["jct sim/real"] = both["jct_mean_s sim"] / both["jct_mean_s real"]
    statistics = ("prefix_kept_pct", "turns_moved_pct", "pin_expired_pct", "jct_mean_s")
    return both[keys + [f"{name} {side}" for name in statistics for side in ("real", "sim")] + ["jct sim/real"]]


def simulated_twin(spec: SweepSpec, options) -> SweepSpec:
    """The grid in the simulator, the CPU engine simulated from its profile measured on this machine."""
    profile = measure_cpu_profile(spec, options)
    print(f"CPU profile: {profile.describe()}")
    return spec.model_copy(update={"name": f"{spec.name}-sim", "engine": EngineKind.SIM, "cpu_profile": profile})


def main(argv: list[str] | None = None) -> int:
    cli = parser(SPEC)
    cli.add_argument("--simulate", action="store_true", help="check the routed simulator against the measured cells")
    args = cli.parse_args(argv)
    spec, options = prepare(SPEC, args)
    code = run_sweep(spec, options)
    rows = table(SweepFiles(options.results_dir / spec.name))
    costs = serve_cost(rows)
    report = {"sweep_exit": code, "cells": rows.to_dict("records"), "serve_cost": costs.to_dict("records")}
    with pd.option_context("display.width", 250, "display.max_columns", 20, "display.float_format", "{:.3g}".format):
        print(rows.to_string(index=False))
        print()
        print(costs.to_string(index=False) if len(costs) else "no Serve/direct pair is done")
        if args.simulate and not options.dry_run:
            twin = simulated_twin(spec, options)
            code = max(code, run_sweep(twin, options))
            compared = real_against_simulated(rows, table(SweepFiles(options.results_dir / twin.name)))
            print()
            print(compared.to_string(index=False))
            report["real_against_simulated"] = compared.to_dict("records")
    print(json.dumps(report, default=str))
    return code


if __name__ == "__main__":
    sys.exit(run_with_one_line_errors(main))
