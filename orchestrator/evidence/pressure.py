"""The pressure plan: cells on one GPU where the KV pool overflows and a CPU tier must serve, chosen by the sizing
library before anything runs, and what each cell showed, as the simulator predicts it and as the engine measures
it (pure).

Where the cells sit. The sizing's working-set estimate (``sizing.agent``) puts a cell in the offload window when the
jobs inside a turn fit the GPU's KV pool and the contexts of every job in flight do not. The plan takes the highest
load (on a 0.1 JPS grid) that the estimate still calls unqueued, and fixes the pool a fifth below the estimated
corpus: inside the window with room for the estimate's error, whichever way it errs. The CPU tier is sized to hold
four such corpora, so that offload is measured against recompute, not against a tier too small to keep a job's
prefix across its tool call. ``max_num_seqs`` is capped where a cell's jobs can never have that many requests in
flight (a job has one at a time): vLLM warms up and captures CUDA graphs for up to its default of 1,024 sequences,
a start cost no such cell can use. Both are recorded with each cell.

What a cell showed (``CellFacts``) is read the same way from a simulated cell and a real one, so a prediction and a
measurement are compared field by field; each policy's mean JCT is compared with the baseline's over the same jobs
(a paired bootstrap, ``records.intervals``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np

from orchestrator.cell.spec import CellSpec, EngineKind
from orchestrator.evidence.tier import tier_activity
from orchestrator.gpus import CPU, GPU_TYPES
from orchestrator.models.arch import load_model
from orchestrator.models.served import Weights
from orchestrator.policies.catalog import get_policy
from orchestrator.records.cell import CellOutcome
from orchestrator.records.intervals import Interval, censored_times, interval, margin_pct
from orchestrator.records.summary import summarize
from orchestrator.sim.stacks import DEFAULT_STACK
from orchestrator.sizing.agent import agent_working_sets
from orchestrator.sizing.kv import kv_bytes_per_token
from orchestrator.sweep.planning.spec import EngineOptions
from orchestrator.units import GIB
from orchestrator.workload.spec import WorkloadSpec

# Run in this order: the baseline first (every margin needs it), then continuum (its start loads the graphs fcfs's
# compiled), then the CUDA-only tiers, each compiling its own (a KV connector changes the graph): the costliest starts.
PRESSURE_POLICIES = ("fcfs", "continuum", "lmcache", "native-offload")
BASELINE = "fcfs"
WINDOW_S = 10.0  # arrival window: about 20 jobs at the plan's load, each cell's span under 45 s predicted
JPS_STEP = 0.1
MAX_OFFERED_LOAD = 0.95  # the sizing's estimate calls a load of 1 queueing
POOL_BELOW_CORPUS = 1.25
POOL_ABOVE_LIVE = 1.25
POOL_ROUNDING_BLOCKS = 250
TIER_CORPORA = 4
MAX_NUM_SEQS = 128
JOBS_MARGIN = 3  # a window's Poisson draw of jobs stays below this many times their expected count
SEED = 42
KV_DTYPE_BYTES = 2  # BF16: vLLM's KV cache takes the model's dtype


@dataclass(frozen=True)
class PressurePoint:
    """Where the plan's cells run: the load, the pool and the tier, and the estimate that chose them."""

    gpu: str
    jps: float
    window_s: float
    kv_blocks: int | None  # None: vLLM sizes the pool (the rehearsal's, on cpu)
    block_size: int
    dram_gb: float
    max_num_seqs: int | None
    live_tokens: float | None  # the sizing's estimate; None where it has none (cpu)
    corpus_tokens: float | None
    offered_load: float | None

    @property
    def pool_tokens(self) -> int | None:
        return None if self.kv_blocks is None else self.kv_blocks * self.block_size

    def describe(self) -> str:
        pool = (f"a pool of {self.kv_blocks:,} blocks ({self.pool_tokens:,} tokens)" if self.kv_blocks is not None
                else "vLLM's own pool")  # fmt: skip
        text = f"{self.jps:g} JPS over {self.window_s:g} s on {self.gpu}, {pool}, a {self.dram_gb:g} GiB CPU tier"
        if self.max_num_seqs is not None:
            text += f", max_num_seqs {self.max_num_seqs}"
        if self.corpus_tokens is not None:
            text += (f"; sizing: live {self.live_tokens / 1e3:,.0f}K, corpus {self.corpus_tokens / 1e3:,.0f}K tokens, "
                     f"offered load {self.offered_load:.2f}")  # fmt: skip
        return text


def pressure_point(gpu: str, model: str, window_s: float = WINDOW_S) -> PressurePoint:
    """The plan's point on ``gpu`` (a type of the catalogue) for ``model``: raises ``ValueError`` with one line
    where the sizing finds no load and pool inside the offload window."""
    if gpu not in GPU_TYPES:
        raise ValueError(f"no pressure point for {gpu!r}: the sizing needs a GPU type of the catalogue "
                         f"({', '.join(GPU_TYPES)})")  # fmt: skip
    arch = load_model(model)
    block = EngineOptions().block_size_on(gpu)
    jps, sets = None, None
    for step in range(1, 1000):
        trial = agent_working_sets(_workload(step * JPS_STEP, window_s), arch, GPU_TYPES[gpu])
        if trial.offered_load >= MAX_OFFERED_LOAD:
            break
        jps, sets = round(step * JPS_STEP, 1), trial
    if sets is None:
        raise ValueError(f"no pressure point on {gpu}: {JPS_STEP:g} JPS already offers a load of "
                         f"{MAX_OFFERED_LOAD:g} or more")  # fmt: skip
    pool_tokens = sets.corpus_tokens / POOL_BELOW_CORPUS
    blocks = int(pool_tokens // block // POOL_ROUNDING_BLOCKS * POOL_ROUNDING_BLOCKS)
    longest = EngineOptions().max_model_len
    if blocks * block < max(sets.live_tokens * POOL_ABOVE_LIVE, longest):
        raise ValueError(f"no pressure point on {gpu}: the offload window at {jps:g} JPS (live "
                         f"{sets.live_tokens:,.0f}, corpus {sets.corpus_tokens:,.0f} tokens) has no pool that holds "
                         f"the live set and a {longest}-token request with room")  # fmt: skip
    tier_bytes = TIER_CORPORA * sets.corpus_tokens * kv_bytes_per_token(arch, KV_DTYPE_BYTES)
    dram_gb = float(2 ** math.ceil(math.log2(tier_bytes / GIB)))
    max_num_seqs = MAX_NUM_SEQS if jps * window_s * JOBS_MARGIN <= MAX_NUM_SEQS else None
    return PressurePoint(gpu, jps, window_s, blocks, block, dram_gb, max_num_seqs, sets.live_tokens,
                         sets.corpus_tokens, sets.offered_load)  # fmt: skip


def rehearsal_point(jps: float, window_s: float, kv_blocks: int | None, block_size: int,
                    dram_gb: float) -> PressurePoint:  # fmt: skip
    """The CPU engine's point for a rehearsal of the plan's machinery: the sizing has no roofline for cpu, so the
    point is the one given (the cells stage's, so that its replica serves both)."""
    return PressurePoint(CPU, jps, window_s, kv_blocks, block_size, dram_gb, None, None, None, None)


def pressure_cells(point: PressurePoint, policies: Sequence[str], model: str, weights: Weights,
                   scale: float = 1.0) -> tuple[CellSpec, ...]:  # fmt: skip
    """The plan's real-engine cells at ``point``, in ``policies``' order."""
    options = EngineOptions(num_kv_blocks=point.kv_blocks, max_num_seqs=point.max_num_seqs)
    workload = _workload(point.jps, point.window_s, scale)
    return tuple(
        CellSpec(engine=EngineKind.VLLM, gpu=point.gpu, policy=policy, model=model, workload=workload, weights=weights,
                 dram_gb=get_policy(policy).dram_gb_taken(point.dram_gb), engine_options=options)
        for policy in policies
    )  # fmt: skip


def simulated(cell: CellSpec, stack: str = DEFAULT_STACK) -> CellSpec:
    """``cell`` in the simulator with the engine stack ``stack``: the same GPU type, pool, load, window and seed."""
    return cell.model_copy(update={"engine": EngineKind.SIM, "weights": Weights.REAL, "sim_stack": stack})


def _workload(jps: float, window_s: float, scale: float = 1.0) -> WorkloadSpec:
    return WorkloadSpec(jps=jps, duration_s=window_s, scale=scale, seed=SEED)


# -- what a cell showed ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CellFacts:
    """One cell's figures, read the same way from the simulator's records and the engine's."""

    policy: str
    jobs: int
    completed: int
    jct_mean_s: float | None
    jct_p90_s: float | None
    ttft_p50_s: float | None
    span_s: float | None
    prompt_tokens: float  # what the server counted over every request
    gpu_hit_tokens: float  # prompt tokens the GPU's prefix cache (or a pin) held
    tier_hit_tokens: float | None  # prompt tokens the CPU tier served; None without a tier
    tier_looked_up_tokens: float | None
    tier_stored_tokens: float | None
    tier_stored_from: str | None
    preemptions: int | None

    @property
    def gpu_hit_share(self) -> float | None:
        return self.gpu_hit_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def tier_served_share(self) -> float | None:
        """The share of the tokens looked up in the tier that it served."""
        if self.tier_hit_tokens is None or not self.tier_looked_up_tokens:
            return None
        return self.tier_hit_tokens / self.tier_looked_up_tokens

    def as_dict(self) -> dict:
        return asdict(self) | {"gpu_hit_share": self.gpu_hit_share, "tier_served_share": self.tier_served_share}

    @classmethod
    def of_dict(cls, values: Mapping) -> CellFacts:
        """The facts ``as_dict`` wrote (its derived shares left out)."""
        return cls(**{spec.name: values[spec.name] for spec in fields(cls)})


def cell_facts(cell: CellSpec, outcome: CellOutcome) -> CellFacts:
    """What ``outcome`` (simulated or real) shows. vLLM's cached tokens of a request count the tier's tokens too, so
    the GPU's share is the cached tokens less what the tier served."""
    summary = summarize(outcome.requests, outcome.jobs, outcome.scheduler_trace)
    ttfts = [record.ttft_s for record in outcome.requests if record.ttft_s is not None]
    cached = float(sum(record.cached_tokens or 0 for record in outcome.requests))
    arch = load_model(cell.model)
    tier = tier_activity(get_policy(cell.policy), outcome, kv_bytes_per_token(arch, KV_DTYPE_BYTES))
    served = tier.served_tokens if tier else None
    return CellFacts(
        policy=cell.policy, jobs=summary.num_jobs, completed=summary.num_completed, jct_mean_s=summary.jct_mean_s,
        jct_p90_s=summary.jct_p90_s, ttft_p50_s=float(np.median(ttfts)) if ttfts else None, span_s=summary.span_s,
        prompt_tokens=float(sum(record.prompt_tokens or 0 for record in outcome.requests)),
        gpu_hit_tokens=cached - (served or 0.0), tier_hit_tokens=served,
        tier_looked_up_tokens=tier.looked_up_tokens if tier else None,
        tier_stored_tokens=tier.stored_tokens if tier else None, tier_stored_from=tier.stored_from if tier else None,
        preemptions=outcome.config.num_preemptions,
    )  # fmt: skip


@dataclass(frozen=True)
class Margin:
    """How much lower a policy's mean job time is than the baseline's, in percent of the baseline's (negative:
    slower): measured over the jobs both ran, with a paired bootstrap interval, and as the simulator predicted it."""

    policy: str
    measured: Interval
    predicted_pct: float | None


def margins(outcomes: Mapping[str, CellOutcome], predicted: Mapping[str, CellFacts]) -> list[Margin]:
    """Every policy of ``outcomes`` but the baseline against the baseline (timeouts censored where they were cut)."""
    base = _job_times(outcomes[BASELINE])
    found = []
    for policy, outcome in outcomes.items():
        if policy == BASELINE:
            continue
        them = _job_times(outcome)
        common = sorted(base.keys() & them.keys())
        measured = interval([(np.array([them[i] for i in common]), np.array([base[i] for i in common]))], margin_pct)
        mine, theirs = predicted.get(policy), predicted.get(BASELINE)
        simulated = (None if mine is None or theirs is None or not mine.jct_mean_s or not theirs.jct_mean_s
                     else (1 - mine.jct_mean_s / theirs.jct_mean_s) * 100)  # fmt: skip
        found.append(Margin(policy, measured, simulated))
    return found


def winner(facts: Mapping[str, CellFacts]) -> str | None:
    """The policy with the lowest mean JCT among those that completed every job."""
    finished = {policy: f.jct_mean_s for policy, f in facts.items()
                if f.jct_mean_s is not None and f.completed == f.jobs}  # fmt: skip
    return min(finished, key=finished.get) if finished else None


def _job_times(outcome: CellOutcome) -> dict[int, float]:
    jobs = sorted(outcome.jobs, key=lambda job: job.job_index)
    arrivals = np.array([job.arrival_at for job in jobs], dtype=float)
    ends = np.array([np.nan if job.finished_at is None else job.finished_at for job in jobs], dtype=float)
    return dict(zip((job.job_index for job in jobs), censored_times(arrivals, ends)))


# -- a prediction beside its measurement -----------------------------------------------------------------------

COMPARED = ("jct_mean_s", "jct_p90_s", "ttft_p50_s", "gpu_hit_share", "tier_served_share")


@dataclass(frozen=True)
class CellComparison:
    policy: str
    band: float  # the simulator's relative error of this cell's mean JCT
    predicted: Mapping[str, float | None]
    measured: Mapping[str, float | None]

    def error(self, name: str) -> float | None:
        """The prediction's error relative to the measurement (positive: the simulator said more)."""
        predicted, measured = self.predicted.get(name), self.measured.get(name)
        if predicted is None or measured is None or measured == 0:
            return None
        return predicted / measured - 1

    @property
    def jct_within_band(self) -> bool | None:
        error = self.error("jct_mean_s")
        return None if error is None else abs(error) <= self.band


def compare(predicted: Mapping[str, Mapping], measured: Mapping[str, Mapping]) -> list[CellComparison]:
    """Per policy that both have, the predicted facts beside the measured ones (each a ``CellFacts.as_dict``).

    Each cell is judged against the band its prediction was committed with, not today's: the bands widen as
    measurements come in, and a held-out test must not move its own goalposts."""
    return [CellComparison(policy, predicted[policy]["band"], predicted[policy], measured[policy])
            for policy in predicted if policy in measured]  # fmt: skip


def comparison_table(rows: list[CellComparison]) -> str:
    """Markdown: each policy's predicted and measured figures with the prediction's error."""
    header = ("| policy | mean JCT predicted / measured (error; band) | p90 JCT | TTFT p50 | GPU prefix share | "
              "CPU tier served share |")  # fmt: skip
    lines = [header, "|---|---|---|---|---|---|"]
    for row in rows:
        cells = []
        for name in COMPARED:
            predicted, measured, error = row.predicted.get(name), row.measured.get(name), row.error(name)
            share = name.endswith("share")
            text = f"{_figure(predicted, share)} / {_figure(measured, share)}"
            if error is not None:
                text += f" ({error:+.0%}" + (f"; ±{row.band:.0%})" if name == "jct_mean_s" else ")")
            cells.append(text)
        lines.append(f"| {row.policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _figure(value: float | None, share: bool) -> str:
    if value is None:
        return "-"
    return f"{value:.0%}" if share else f"{value:.2f} s"
