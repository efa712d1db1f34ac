"""The simulator against the real engine on hardware we have: the CPU build of vLLM and the tiny model.

    python benchmarks/sim_vs_cpu.py [--results-dir DIR] [--duration-s 30] [--jps 1,6]

1. Profiles the real engine: one fcfs cell at a light load on a different seed (sweep
   ``honesty-profile``, ``orchestrator/sweep/profiling.py``). Its step times fit the CPU's roofline and its
   request latencies the API server's per-request time (``orchestrator/sim/profile.py``). That is the simulator's whole
   configuration of this machine: nothing is fitted on the cells compared.
2. Measures fcfs and continuum at a low and a saturating load on the real engine (sweep ``honesty``),
   with the pool the CPU sweep uses (2400 blocks of 32 tokens) so that FCFS loses its prefix hits at the
   saturating load.
3. Simulates the same cells (same schedule and pool, the token budget the real engine used) and prints
   the error of each metric per cell; ``honesty.json`` in the results directory has it all. The last
   line is one JSON object.

Both sweeps are ordinary sweeps: re-running fills only what is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # the project root instead of benchmarks/

import pandas as pd  # noqa: E402

from orchestrator.records.layout import SweepFiles  # noqa: E402
from orchestrator.records.schema import JobStatus, to_row  # noqa: E402
from orchestrator.sim.engine import SimResult  # noqa: E402
from orchestrator.sim.profile import simulate_cell  # noqa: E402
from orchestrator.sizing.models import load_model  # noqa: E402
from orchestrator.sweep.driver import SweepOptions, run_sweep  # noqa: E402
from orchestrator.sweep.profiling import measure_cpu_profile, profile_spec  # noqa: E402
from orchestrator.sweep.tracking import default_tracking_uri  # noqa: E402
from sweeps.cpu_tiny import SPEC as CPU_TINY  # noqa: E402

LATER_TURNS = range(3, 9)


def cell_metrics(requests: pd.DataFrame, jobs: pd.DataFrame) -> dict[str, float]:
    done = jobs[jobs.status == JobStatus.COMPLETED.value]
    ok = requests[requests.status == "ok"]
    later = ok[ok.turn.isin(LATER_TURNS)]
    return {
        "jct_mean_s": float((done.finished_at - done.arrival_at).mean()),
        "jct_p90_s": float((done.finished_at - done.arrival_at).quantile(0.9)),
        "t1_mean_s": float(ok[ok.turn == 1].latency_s.mean()),
        "t_last_mean_s": float(ok[ok.turn == ok.turn.max()].latency_s.mean()),
        "cached_of_best": float(later.cached_tokens.sum() / later.best_cached_tokens.sum()),
        "completed": float(len(done)),
    }


def _frames(result: SimResult) -> tuple[pd.DataFrame, pd.DataFrame]:
    return pd.DataFrame([to_row(r) for r in result.requests]), pd.DataFrame([to_row(j) for j in result.jobs])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results-dir", type=Path, default=Path("results").absolute())
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--jps", default="1,6", help="the low and the saturating load (jobs per second)")
    args = parser.parse_args(argv)
    results = args.results_dir.absolute()
    options = SweepOptions(results_dir=results, tracking_uri=default_tracking_uri(results), live=False, progress_interval_s=30)
    workload = CPU_TINY.workload.model_copy(update={"duration_s": args.duration_s})
    jps = tuple(float(level) for level in args.jps.split(","))
    compared_spec = CPU_TINY.model_copy(update={"name": "honesty", "policies": ("fcfs", "continuum"), "jps": jps,
                                               "workload": workload})  # fmt: skip
    profile = measure_cpu_profile(compared_spec, options)
    if run_sweep(compared_spec, options) != 0:
        print(f"error: the real sweep {compared_spec.name} did not finish; see {results / compared_spec.name}",
              file=sys.stderr)  # fmt: skip
        return 1
    arch = load_model(compared_spec.model)
    print(f"CPU profile from {profile_spec(compared_spec).name}: {profile.describe()}")

    files = SweepFiles(results / "honesty")
    summary = pd.read_parquet(files.summary)
    rows = []
    for cell in summary.itertuples():
        cell_files = files.cell(cell.cell_key)
        real = cell_metrics(pd.read_parquet(cell_files.requests), pd.read_parquet(cell_files.jobs))
        simulated = cell_metrics(*_frames(simulate_cell(profile, arch, cell.policy, workload.model_copy(update={"jps": cell.jps}))))
        rows.append({"policy": cell.policy, "jps": cell.jps, "real": real, "sim": simulated,
                     "error": {name: (simulated[name] - real[name]) / real[name] for name in real if real[name]}})  # fmt: skip
    print("| policy | JPS | metric | real | simulated | error |\n|---|---|---|---|---|---|")
    for row in rows:
        for name in row["real"]:
            error = row["error"].get(name)
            print(f"| {row['policy']} | {row['jps']:g} | {name} | {row['real'][name]:.3f} | {row['sim'][name]:.3f} | "
                  f"{'' if error is None else f'{error:+.0%}'} |")  # fmt: skip
    worst = max(abs(row["error"]["jct_mean_s"]) for row in rows)
    print(f"\nworst average-JCT error {worst:.0%} (target: within 25% in every cell)")
    (results / "honesty.json").write_text(json.dumps({"profile": asdict(profile), "cells": rows}, indent=2))
    print(f"wrote {results / 'honesty.json'}")
    print(json.dumps({"worst_jct_error": round(worst, 3), "cells": [
        {"policy": row["policy"], "jps": row["jps"], "jct_error": round(row["error"]["jct_mean_s"], 3)} for row in rows]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
