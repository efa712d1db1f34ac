"""The simulator against published measurements of Llama-3.1-8B served on one GPU of each type, and of larger models
served by a tensor-parallel replica of several.

Each figure of ``orchestrator/sim/measured/public_figures.toml`` (a decode rate, a prefill time, a batch's latency, an
MLPerf throughput) is simulated under the settings it was measured with (model, GPUs per replica, precision, batch
limits, lengths, load) and printed beside the published value with its source. The simulator's constants are the H200
calibration, the microbenchmarks of ``orchestrator/roofline/gpu_rates.toml`` and one constant a figure sets
(``derives``: the per-request cost of a step, which only a batch of hundreds shows); every other figure is a check, held
to 20%. A figure beyond it must say why (``known_gap``), or the run fails. Then per GPU type the RMS relative error over
all its figures, which ``--write-errors`` stores as the ``public_figures`` table of ``orchestrator/sim/sim_error.toml``:
the part of a simulated verdict's band that comes from the GPU.

    python benchmarks/public_figures.py [--only ID ...] [--write-errors] [--figures FILE]
    python benchmarks/public_figures.py --derive    # solve for the derived constant, rewrite calibration.toml

The last line is one JSON object: per figure its published and simulated value, and the errors per GPU. The exit
status is 1 when a figure is beyond 20% without a stated reason.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestrator.gpus import GPU_TYPES
from orchestrator.models.arch import load_model
from orchestrator.records.schema import RequestRecord
from orchestrator.roofline.hardware import CALIBRATION_FILE, Calibration, Device, Precision
from orchestrator.sim.calibrate import MODEL, h200_log_error, write_calibration
from orchestrator.sim.config import sim_engine
from orchestrator.sim.error_bands import SIM_ERROR_FILE, write_gpu_errors
from orchestrator.sim.loop import simulate
from orchestrator.workload.schedule import JobShape, Schedule, TurnShape, job_id_for, poisson_arrivals
from orchestrator.workload.spec import WorkloadSpec

FIGURES_FILE = Path(__file__).resolve().parents[1] / "orchestrator" / "sim" / "measured" / "public_figures.toml"
WITHIN = 0.20  # the accuracy each figure is held to
SERVER_WINDOW_S = 120.0  # arrivals simulated per probed rate of a server figure
SERVER_STEPS = 12  # bisections of the rate: 2^-12 of the bracket
DERIVE_STEPS = 30  # bisections of a derived constant's logarithm


class Figure(BaseModel):
    """One published measurement and the settings it was measured under."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    gpu: str
    engine: str
    metric: Literal["tpot_ms", "ttft_ms", "batch_latency_ms", "offline_tokens_s", "server_tokens_s"]
    published: float = Field(gt=0)
    model: str = MODEL  # a shipped config or its Hugging Face name
    tp: int = Field(1, ge=1)  # GPUs of the replica (tensor parallelism)
    input_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=2)
    requests: int | None = Field(None, ge=1)
    batch: int | None = Field(None, ge=1)
    weights: Literal["model", "fp8"] = "model"
    kv_cache: Literal["bf16", "fp8"] = "bf16"
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)  # vLLM's default
    ttft_limit_ms: float | None = Field(None, gt=0)
    tpot_limit_ms: float | None = Field(None, gt=0)
    assumed: str = ""
    derives: Literal["seq_overhead_s"] | None = None  # the calibration constant this figure sets (then not a check)
    known_gap: str = ""  # why the simulator misses this figure by more than 20%, where it does
    source: str

    @model_validator(mode="after")
    def _settings_of_its_metric(self) -> Figure:
        if self.gpu not in GPU_TYPES:
            raise ValueError(f"gpu {self.gpu!r} is not a GPU type; valid: {', '.join(GPU_TYPES)}")
        load_model(self.model)  # a ValueError naming the shipped configs when it is none of them
        needed = {"offline_tokens_s": ("requests",), "batch_latency_ms": ("batch",),
                  "server_tokens_s": ("ttft_limit_ms", "tpot_limit_ms")}.get(self.metric, ())  # fmt: skip
        missing = [name for name in needed if getattr(self, name) is None]
        if missing:
            raise ValueError(f"metric {self.metric} needs {', '.join(missing)}")
        return self


class Excluded(BaseModel):
    """A published figure found and not used, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    source: str
    reason: str


def load_figures(path: Path = FIGURES_FILE) -> tuple[list[Figure], list[Excluded]]:
    """The figures and the excluded ones of ``path``; a malformed entry raises ``ValueError`` naming the file, the
    entry and the field."""
    return load_figures_from_text(path.read_text(), str(path))


def load_figures_from_text(text: str, origin: str = "figures") -> tuple[list[Figure], list[Excluded]]:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{origin}: {error}") from None
    parsed: dict[str, list] = {"figure": [], "excluded": []}
    for table, model in (("figure", Figure), ("excluded", Excluded)):
        for number, entry in enumerate(document.get(table, []), start=1):
            try:
                parsed[table].append(model(**entry))
            except ValidationError as error:
                problem = error.errors()[0]
                field = ".".join(str(part) for part in problem["loc"]) or "entry"
                raise ValueError(f"{origin}: {table} {entry.get('id', f'#{number}')}: {field}: {problem['msg']}") from None
    return parsed["figure"], parsed["excluded"]


def simulated(figure: Figure, calibration: Calibration | None = None) -> float:
    """The figure's metric as the simulator gives it under the figure's settings (and ``calibration``, the shipped
    one when None)."""
    if figure.metric == "server_tokens_s":
        rate = highest_rate_within_limits(figure, calibration)
        return rate * figure.output_tokens
    count = {"batch_latency_ms": figure.batch, "offline_tokens_s": figure.requests}.get(figure.metric) or 1
    records = _run(figure, [0.0] * count, calibration)
    if figure.metric == "tpot_ms":
        return _tpot_s(records[0]) * 1e3
    if figure.metric == "ttft_ms":
        return records[0].ttft_s * 1e3
    end = max(record.finished_at for record in records)
    if figure.metric == "batch_latency_ms":
        return end * 1e3
    return sum(record.completion_tokens for record in records) / end


def highest_rate_within_limits(figure: Figure, calibration: Calibration | None = None) -> float:
    """The highest Poisson rate (requests per second) at which the 99th percentiles of TTFT and TPOT stay within the
    figure's limits, by bisection between an idle rate and one past what the GPU can serve."""

    def within(rate: float) -> bool:
        records = _run(figure, list(poisson_arrivals(rate, SERVER_WINDOW_S, seed=42)), calibration)
        done = [record for record in records if record.finished_at is not None]
        if len(done) < len(records):
            return False
        ttft = _p99([record.ttft_s for record in done])
        tpot = _p99([_tpot_s(record) for record in done])
        return ttft * 1e3 <= figure.ttft_limit_ms and tpot * 1e3 <= figure.tpot_limit_ms

    low, high = 0.0, 1.0
    while within(high):
        low, high = high, high * 2
    for _ in range(SERVER_STEPS):
        middle = (low + high) / 2
        low, high = (middle, high) if within(middle) else (low, middle)
    return low


def derived_value(figure: Figure, calibration: Calibration) -> float:
    """The value of the constant ``figure`` derives at which the simulated figure equals the published one, by
    bisection of its logarithm between 1 us and 1 ms (a per-request cost slows every metric it touches)."""
    low, high = math.log(1e-6), math.log(1e-3)
    slower_is_larger = figure.metric.endswith("_ms")
    for _ in range(DERIVE_STEPS):
        middle = (low + high) / 2
        value = simulated(figure, calibration.with_values(**{figure.derives: math.exp(middle)}))
        too_slow = value > figure.published if slower_is_larger else value < figure.published
        low, high = (low, middle) if too_slow else (middle, high)
    return math.exp((low + high) / 2)


def _run(figure: Figure, arrivals: list[float], calibration: Calibration | None = None) -> list[RequestRecord]:
    """One-turn requests of the figure's lengths at ``arrivals`` (no prefix shared between them), for the figure's model
    on a replica of its GPUs at its precision and batch limits; the request records in arrival order."""
    turn = TurnShape(1, figure.input_tokens, figure.output_tokens, None, 0.0, True, 0)
    jobs = tuple(JobShape(job_id_for(42, index), index, at, (turn,)) for index, at in enumerate(arrivals))
    horizon = (max(arrivals) if arrivals else 0.0) + 3600.0
    workload = WorkloadSpec(jps=1.0, duration_s=horizon, system_prompt_tokens=1, num_turns=1, tool_tokens=(),
                            request_timeout_s=horizon, job_timeout_s=horizon)  # fmt: skip
    engine = sim_engine(Device.gpu(figure.gpu), figure.model, "fcfs", 0.0, workload, calibration=calibration,
                        gpu_memory_utilization=figure.gpu_memory_utilization,
                        max_num_batched_tokens=figure.max_num_batched_tokens, max_num_seqs=figure.max_num_seqs,
                        precision=Precision(weights=figure.weights, kv_cache=figure.kv_cache),
                        tp=figure.tp)  # fmt: skip
    result = simulate(workload, engine, Schedule("parametric", 0, jobs))
    return sorted(result.requests, key=lambda record: record.job_index)


def _tpot_s(record: RequestRecord) -> float:
    return (record.finished_at - record.first_token_at) / (record.completion_tokens - 1)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def gpu_errors(rows: list[tuple[Figure, float]]) -> dict[str, float]:
    """Per GPU type, the RMS relative error of the simulated figures against the published ones, over its checks (a
    figure that sets a constant matches by construction), the ones not reproduced included."""
    squares: dict[str, list[float]] = {}
    for figure, value in rows:
        if figure.derives:
            continue
        squares.setdefault(figure.gpu, []).append(((value - figure.published) / figure.published) ** 2)
    return {gpu: math.sqrt(statistics.fmean(values)) for gpu, values in squares.items()}


def beyond(figure: Figure, value: float) -> bool:
    return abs(value - figure.published) / figure.published > WITHIN


def table(rows: list[tuple[Figure, float]], excluded: list[Excluded]) -> str:
    lines = ["| figure | GPU | engine | metric | role | published | simulated | error | within 20% |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for figure, value in rows:
        role = f"sets {figure.derives}" if figure.derives else "check"
        gpus = figure.gpu if figure.tp == 1 else f"{figure.tp} x {figure.gpu}"
        lines.append(f"| {figure.id} | {gpus} | {figure.engine} | {figure.metric} | {role} | "
                     f"{figure.published:.6g} | {value:.4g} | {(value - figure.published) / figure.published:+.0%} | "
                     f"{'NO' if beyond(figure, value) else 'yes'} |")  # fmt: skip
    lines += ["", "Sources and what was assumed:"]
    lines += [f"- {figure.id}: {figure.source}" + (f" Assumed: {figure.assumed}." if figure.assumed else "")
              for figure, _ in rows]  # fmt: skip
    missed = [(figure, value) for figure, value in rows if beyond(figure, value)]
    if missed:
        lines += ["", "Not reproduced within 20%, and why:"]
        lines += [f"- {figure.id}: {figure.known_gap or 'NO REASON RECORDED'}" for figure, _ in missed]
    if excluded:
        lines += ["", "Found and not used:"]
        lines += [f"- {entry.id}: {entry.reason} ({entry.source})" for entry in excluded]
    errors = gpu_errors(rows)
    lines += ["", "RMS relative error per GPU type: " + ", ".join(f"{gpu} {error:.3f}" for gpu, error in errors.items())]
    return "\n".join(lines)


def derive(figures: list[Figure]) -> None:
    """Each derived constant solved on its figure, written to calibration.toml with the H200 cells' error under it."""
    calibration = Calibration.load()
    for figure in figures:
        if figure.derives:
            print(f"deriving {figure.derives} from {figure.id} ...", file=sys.stderr, flush=True)
            calibration = calibration.with_values(**{figure.derives: derived_value(figure, calibration)})
            print(f"{figure.derives} = {getattr(calibration, figure.derives):.6g} (from {figure.id})")
    write_calibration(calibration, h200_log_error(calibration))
    print(f"wrote {CALIBRATION_FILE}")



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/public_figures.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--figures", type=Path, default=FIGURES_FILE, help="the figures file (default: the shipped one)")
    parser.add_argument("--only", nargs="+", metavar="ID", help="simulate only these figures")
    parser.add_argument("--write-errors", action="store_true",
                        help=f"write the RMS error per GPU type as the public_figures table of {SIM_ERROR_FILE}")
    parser.add_argument("--derive", action="store_true",
                        help=f"solve for the constant each figure derives and rewrite {CALIBRATION_FILE}")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        figures, excluded = load_figures(args.figures)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.only:
        unknown = sorted(set(args.only) - {figure.id for figure in figures})
        if unknown:
            print(f"error: no figure {', '.join(unknown)}; valid: {', '.join(f.id for f in figures)}", file=sys.stderr)
            return 2
        figures = [figure for figure in figures if figure.id in args.only]
    if args.derive:
        derive(figures)
    rows = []
    for figure in figures:
        print(f"simulating {figure.id} ...", file=sys.stderr, flush=True)
        rows.append((figure, simulated(figure)))
    print(table(rows, excluded))
    if args.write_errors:
        write_gpu_errors(gpu_errors(rows))
        print(f"wrote {SIM_ERROR_FILE}")
    print(json.dumps({"figures": {figure.id: {"published": figure.published, "simulated": value} for figure, value in rows},
                      "gpu_errors": gpu_errors(rows)}))  # fmt: skip
    return 1 if any(beyond(figure, value) and not figure.known_gap for figure, value in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
