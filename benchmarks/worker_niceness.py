"""What the niceness of a cell's servers and clients does to CPU cells under KV pressure when something else keeps the
machine busy.

    python benchmarks/worker_niceness.py [--niceness 15,0] [--busy 0,1] [--results-dir DIR]

A cell's server and clients run at the niceness of the Ray workers that start them: Ray's default adds 15 to the
node's, which a cell's actors ask Ray to leave out (``orchestrator/replica/priority.py``). For each niceness and each
number of busy processes (each an interpreter spinning at this process's priority, as a test process or another job
beside a cell would), this runs the CPU sweep's pressure cells (fcfs and continuum at ``sizing.agent.pressure_jps``,
8 JPS on a 1200-block pool, as ``tests/integration/test_cpu_sweep.py`` runs them) in a process of its own, started at
that niceness, that starts a local Ray cluster, and prints per cell: the niceness its server ran at, the share of the
prefix that turns 3-8 found cached of what their job's earlier turns left, how Continuum's pins ended (the job's
next turn, the 2 s TTL, memory pressure), and the mean JCT. Then one JSON line. Each cell is one trial.

The busy processes take a whole core each: on a two-core machine, run nothing else beside.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd

from orchestrator.cell.cell_json import read_cell_json
from orchestrator.cell.spec import EngineKind
from orchestrator.records.layout import SweepFiles
from orchestrator.records.names import read_summary
from orchestrator.records.scheduler_trace import pin_releases
from orchestrator.records.scheduler_trace_file import trace_events
from orchestrator.replica.priority import NORMAL_NICENESS, WORKER_NICENESS_ENV
from orchestrator.sizing.agent import pressure_jps
from orchestrator.sweep.planning.spec import EngineOptions, RunLimits, SweepSpec
from orchestrator.workload.spec import WorkloadSpec

LATER_TURNS_FROM = 3
WORKLOAD = WorkloadSpec(jps=1, duration_s=4, scale=0.25, request_timeout_s=300, job_timeout_s=600)
ENGINE = EngineOptions(num_kv_blocks=1200)
RELEASES = ("next_turn", "ttl", "pressure")


def pressure_spec() -> SweepSpec:
    """fcfs and continuum where the contexts tool calls alone keep alive exceed the pool (vLLM keeps one block)."""
    heavy = pressure_jps(WORKLOAD, (ENGINE.num_kv_blocks - 1) * ENGINE.block_size_on("cpu"))
    return SweepSpec(name="niceness", engine=EngineKind.VLLM, gpus=("cpu",), policies=("fcfs", "continuum"),
                     jps=(heavy,), workload=WORKLOAD, engine_options=ENGINE,
                     limits=RunLimits(health_timeout_s=300, hang_timeout_s=120, client_actors=2))  # fmt: skip


def cell_rows(files: SweepFiles) -> list[dict]:
    """Per done cell of a sweep: its policy, load, server's niceness, the prefix share later turns kept, how its
    pins ended, and its mean JCT."""
    rows = []
    for row in read_summary(files.summary).itertuples():
        if row.status != "done":
            continue
        cell = files.cell(row.cell_key)
        requests = pd.read_parquet(cell.requests)
        later = requests[requests.turn >= LATER_TURNS_FROM]
        ended = Counter(reason.value for reason in pin_releases(trace_events(cell.scheduler_trace.read_bytes())).values())
        rows.append({
            "policy": row.policy, "jps": row.jps, "server_niceness": read_cell_json(cell.config).server_niceness,
            "kept": float(later.cached_tokens.sum() / later.best_cached_tokens.sum()),
            **{f"pins_{reason}": ended.get(reason, 0) for reason in RELEASES}, "jct_mean_s": float(row.jct_mean_s),
        })  # fmt: skip
    return rows


def _measure(results_dir: Path) -> None:
    """In a process of its own: a local cluster started at this process's niceness, the pressure cells (measured
    again if ``results_dir`` holds them), the rows as one JSON line."""
    import ray

    from orchestrator.sweep.planning.options import SweepOptions
    from orchestrator.sweep.runtime.driver import run_sweep
    from orchestrator.sweep.runtime.tracking import default_tracking_uri

    spec = pressure_spec()
    ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    options = SweepOptions(results_dir=results_dir, tracking_uri=default_tracking_uri(results_dir), live=False,
                           rerun=True)  # fmt: skip
    if run_sweep(spec, options) != 0:
        raise SystemExit(f"the sweep in {results_dir} did not finish every cell")
    print(json.dumps(cell_rows(SweepFiles(results_dir / spec.name))))


def _measured_with(niceness: int, busy: int, results_dir: Path) -> list[dict]:
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        env = {**os.environ, WORKER_NICENESS_ENV: str(NORMAL_NICENESS), "RAY_ADDRESS": ""}
        done = subprocess.run([sys.executable, __file__, "--measure", str(results_dir)], env=env, capture_output=True,
                              text=True, check=False, preexec_fn=lambda: os.nice(niceness))  # fmt: skip
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    if done.returncode != 0:
        raise SystemExit(f"nice {niceness}, {busy} busy: {(done.stderr.strip().splitlines() or [''])[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _counts(text: str) -> tuple[int, ...]:
    """A comma-separated list of whole numbers, at least 0."""
    try:
        values = tuple(int(value) for value in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: valid: whole numbers from 0, comma-separated, e.g. 15,0")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--niceness", type=_counts, default=(15, 0), help="the cluster's niceness values (15,0)")
    parser.add_argument("--busy", type=_counts, default=(0, 1), help="how many busy processes beside the cells (0,1)")
    parser.add_argument("--results-dir", type=Path, default=Path("results/worker-niceness"))
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # one configuration, in its own process
    args = parser.parse_args(argv)
    if args.measure:
        _measure(args.measure)
        return 0
    rows = []
    for niceness in args.niceness:
        for busy in args.busy:
            print(f"nice {niceness}, {busy} busy ...", file=sys.stderr, flush=True)
            measured = _measured_with(niceness, busy, args.results_dir / f"nice{niceness}-busy{busy}")
            rows += [{"niceness": niceness, "busy": busy, **row} for row in measured]
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda value: f"{value:.3f}"))
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
