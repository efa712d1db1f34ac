"""How close a simulated cell is to the measured one on the same schedule (pure).

A mean job time can agree for the wrong reasons, so a cell is compared on the shape that the policies
differ in: where the per-turn latency spikes and the level of the later turns, the share of the reachable
prefix the later turns found cached, preemptions, and where a request's time went: waiting to be admitted or
in the engine. Both sides come from the same records and scheduler trace, written by the real engine or by
the simulator. A real cell's trace runs on the Unix clock and its records on the load's own epoch, so the
split uses differences on one clock only: a request's time in the engine is from its first admission to its
finish in the trace, and the rest of its latency (the client's clock) is its wait, the API server included.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from orchestrator.analysis.verdicts import censored_job_times
from orchestrator.records.intervals import interval
from orchestrator.records.scheduler_trace import Admit, Finish, Step, TraceEvent

FIRST_LATER_TURN = 3  # turns 1-2 fill the cache; from turn 3 on a turn's prefix hit is the policy's doing


@dataclass(frozen=True)
class CellShape:
    """What one cell measured, in the terms the simulator is judged on."""

    jct_mean_s: float  # censored: a job that did not complete counts the time it ran
    completed_pct: float
    turn_mean_s: dict[int, float]  # mean latency per turn index
    spike_turn: int  # the turn with the highest mean latency
    spike_turns: tuple[int, ...]  # it and the turns the measurement cannot tell from it (see ``peak_turns``)
    later_mean_s: float  # mean latency of the requests from turn 3 on
    cached_of_best: float  # of the prefix turns 3+ could have found (their job's previous turn), the share found
    num_preemptions: int
    engine_mean_s: float  # per request, from its first admission to its finish
    wait_mean_s: float  # per request, its latency less its time in the engine: the API server and the queue


def time_in_engine(trace: list[TraceEvent]) -> pd.Series:
    """Seconds from each request's first admission to its finish, by (job, turn); preempted requests count
    the time they spent waiting to be readmitted, as their clients do."""
    admitted, finished = {}, {}
    for event in trace:
        if isinstance(event, Admit) and event.job_id is not None:
            admitted.setdefault((event.job_id, event.turn), event.t)
        elif isinstance(event, Finish) and event.job_id is not None:
            finished[(event.job_id, event.turn)] = event.t
    keys = sorted(admitted.keys() & finished.keys())
    index = pd.MultiIndex.from_tuples(keys, names=["job_id", "turn"]) if keys else None
    return pd.Series([finished[key] - admitted[key] for key in keys], index=index, dtype=float)


def peak_turns(requests: pd.DataFrame) -> tuple[int, ...]:
    """The turn with the highest mean latency and every turn whose mean these requests cannot tell from it:
    paired over the jobs that ran both turns, the 95% interval of the difference (a bootstrap over jobs)
    reaches zero. Two turns within a few percent of each other trade places from one run to the next, so a
    prediction is held to the peak only as sharply as the measurement shows it."""
    latency = requests.pivot_table(index="job_id", columns="turn", values="latency_s")
    means = latency.mean()
    peak = int(means.idxmax())
    ties = []
    for turn in means.index:
        pairs = latency[[peak, turn]].dropna().to_numpy()
        gap = interval([(pairs[:, 0], pairs[:, 1])], lambda a, b: (a - b).mean(axis=-1))
        if turn == peak or not gap.excludes(0.0):
            ties.append(int(turn))
    return tuple(ties)


def cell_shape(requests: pd.DataFrame, jobs: pd.DataFrame, trace: list[TraceEvent]) -> CellShape:
    """The shape of one cell from its request rows, job rows and scheduler trace."""
    times = censored_job_times(jobs)
    ok = requests.dropna(subset=["latency_s"])
    turn_mean = ok.groupby("turn").latency_s.mean()
    later = ok[ok.turn >= FIRST_LATER_TURN]
    best = later.best_cached_tokens.sum()
    split = ok.set_index(["job_id", "turn"]).latency_s.to_frame().join(time_in_engine(trace).rename("engine_s"),
                                                                      how="inner")  # fmt: skip
    return CellShape(
        jct_mean_s=float(times.time_s.mean()),
        completed_pct=float(times.completed.mean() * 100),
        turn_mean_s={int(turn): float(latency) for turn, latency in turn_mean.items()},
        spike_turn=int(turn_mean.idxmax()),
        spike_turns=peak_turns(ok),
        later_mean_s=float(later.latency_s.mean()),
        cached_of_best=float(later.cached_tokens.sum() / best) if best else float("nan"),
        num_preemptions=sum(event.preempted for event in trace if isinstance(event, Step)),
        engine_mean_s=float(split.engine_s.mean()),
        wait_mean_s=float((split.latency_s - split.engine_s).mean()),
    )


def relative_error(simulated: float, measured: float) -> float:
    """(simulated - measured) / measured; NaN where the measurement is 0 or missing."""
    return (simulated - measured) / measured if measured and measured == measured else float("nan")


def shape_row(measured: CellShape, simulated: CellShape) -> dict:
    """One comparison row: each scalar of both shapes side by side, the mean JCT's relative error, and
    whether the simulated spike falls on the measured one (or a turn the measurement cannot tell from it)."""
    row = {"spike_turns_real": measured.spike_turns}
    for name, value in asdict(measured).items():
        if name not in ("turn_mean_s", "spike_turns"):
            row[f"{name}_real"], row[f"{name}_sim"] = value, getattr(simulated, name)
    row["jct_error"] = relative_error(simulated.jct_mean_s, measured.jct_mean_s)
    row["spike_same"] = simulated.spike_turn in measured.spike_turns
    return row


def error_by_policy(rows: pd.DataFrame) -> dict[str, float]:
    """Per policy, the root-mean-square relative error of the simulated mean JCT over its cells: the
    simulator's error band for that policy, as ``sim_error.toml`` holds it."""
    return {str(policy): float(np.sqrt((group.jct_error**2).mean())) for policy, group in rows.groupby("policy")}
