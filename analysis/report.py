"""One self-contained HTML report of a sweep (figures embedded), with a CSV per table.

    python -m orchestrator.analysis.report DIR/<sweep> [--compare DIR/<other sweep>] [--out DIR]

Writes ``report.html``, a page per detailed cell under ``cells/`` (linked from it) and ``tables/*.csv`` under
``--out`` (default ``DIR/<sweep>/report``), saying on stderr what it is building as it goes. Every table says
whether its numbers were measured, simulated or come from the fake engine; missing cells show as "—" and are listed
with the reason. Figures and tables are drawn from aggregates (a cell's steps binned by ``analysis.timeline``), so
the report's time and memory do not grow with the length of the cells' traces.
"""

from __future__ import annotations

import argparse
import base64
import html
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from orchestrator.analysis import capacity, plots, predicted, tables
from orchestrator.analysis.load import SweepData, cell_records, load_sweep, sim_errors, sim_stacks, sweep_files
from orchestrator.analysis.timeline import NUM_BINS, step_bins
from orchestrator.analysis.verdicts import flips, verdicts
from orchestrator.cell.cell_json import read_cell_json
from orchestrator.inputs.parser import command_parser
from orchestrator.records.cell import CellStatus
from orchestrator.records.layout import REPORT_TABLES_DIR, VERDICTS_FILE
from orchestrator.records.names import read_summary
from orchestrator.records.scheduler_trace_file import trace_file_frame
from orchestrator.records.verdict import VerdictKind, verdict_frame
from orchestrator.sim.stacks import get_stack

REPORT_FILE = "report.html"
CELL_PAGES_DIR = "cells"
EVENT_KINDS = ("admit", "finish", "unpin", "evict")  # the trace's rows but its steps: what the tables read
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1400px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f0f0f0; }
.provenance { color: #555; font-style: italic; margin: 0; }
.fake { color: #a00; font-weight: bold; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0 1.5em; }
"""


class ReportBuilder:
    """One page of the report: ``page`` under ``out_dir`` (``report.html``, or ``cells/<name>.html``), its tables'
    CSV files in ``out_dir/tables``."""

    def __init__(self, out_dir: Path, page: str = REPORT_FILE):
        self.out_dir = out_dir
        self.page = page
        self.to_root = "../" * page.count("/")  # the page's links to the tables are relative
        self.parts: list[str] = []
        self.csv_names: list[str] = []

    def heading(self, text: str, level: int = 2) -> None:
        self.parts.append(f"<h{level}>{html.escape(text)}</h{level}>")

    def paragraph(self, text: str) -> None:
        self.parts.append(f"<p>{html.escape(text)}</p>")

    def table(self, name: str, title: str, frame: pd.DataFrame, provenance: str, percent: tuple[str, ...] = ()) -> None:
        """An HTML table under its title and provenance, and the same numbers as ``tables/<name>.csv``;
        columns whose names start with a ``percent`` prefix show as percentages."""
        csv_path = self.out_dir / REPORT_TABLES_DIR / f"{name}.csv"
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(csv_path, index=False)
        self.csv_names.append(csv_path.name)
        as_percent = {column: "{:.1%}".format for column in frame.columns if str(column).startswith(percent or "\0")}
        shown = frame.to_html(index=False, na_rep="—", float_format=_plain_number, formatters=as_percent, border=0)
        css = "provenance fake" if "fake engine" in provenance else "provenance"
        self.parts.append(
            f'<h3 id="{name}">{html.escape(title)}</h3><p class="{css}">{html.escape(provenance)} · '
            f'<a href="{self.to_root}{REPORT_TABLES_DIR}/{csv_path.name}">{csv_path.name}</a></p>{shown}'
        )

    def figure(self, caption: str, png: bytes) -> None:
        encoded = base64.b64encode(png).decode()
        self.parts.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{encoded}">'
                          f"<figcaption>{html.escape(caption)}</figcaption></figure>")  # fmt: skip

    def links(self, targets: list[tuple[str, str]]) -> None:
        """A list of links, each (relative address, text)."""
        items = "".join(f'<li><a href="{html.escape(href)}">{html.escape(text)}</a></li>' for href, text in targets)
        self.parts.append(f"<ul>{items}</ul>")

    def write(self, title: str) -> Path:
        page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                f"<style>{STYLE}</style></head><body>{''.join(self.parts)}</body></html>")  # fmt: skip
        path = self.out_dir / self.page
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page)
        return path


class Progress:
    """A line on stderr per stage of the report, with the seconds since it began."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, stage: str) -> None:
        print(f"[report {time.monotonic() - self.started:5.1f} s] {stage}", file=sys.stderr, flush=True)


def build_report(sweep_dir: Path, out_dir: Path | None = None, compare: Path | None = None,
                 progress: Callable[[str], None] | None = None) -> Path:  # fmt: skip
    progress = progress or Progress()
    progress(f"reading {sweep_dir}")
    data = load_sweep(sweep_dir)
    out_dir = Path(out_dir or data.files.report).absolute()
    out_dir.mkdir(parents=True, exist_ok=True)
    report = ReportBuilder(out_dir)
    report.heading(f"Sweep {data.name}", 1)
    done, total = len(data.done), len(data.summary)
    report.paragraph(f"{done} of {total} cells done. Numbers: {data.provenance()}. Results: {data.directory}.")
    _dropped_jobs(report, data)
    _capacity(report, data)
    progress(f"verdicts over {done} done cells")
    per_policy = _verdicts(report, data)
    _simulator(report, data)
    _routing(report, data)
    _ranks(report, data)
    _serve_cost(report, data)
    _overview(report, data)
    for number, gpu in enumerate(data.gpus, 1):
        progress(f"{gpu} ({number} of {len(data.gpus)} GPU types)")
        _gpu_section(report, data, gpu, per_policy, progress)
    if compare is not None:
        progress(f"beside {compare}")
        _comparison(report, data, load_sweep(compare))
    path = report.write(f"kvsweep report: {data.name}")
    progress(f"written: {path}")
    return path


def _dropped_jobs(report: ReportBuilder, data: SweepData) -> None:
    """Jobs that ``--max-context`` left out of the schedules, said before any number that comes without them."""
    done = data.done
    if "num_jobs_dropped" not in done or not done.num_jobs_dropped.fillna(0).any():
        return
    limits = " and ".join(f"{int(limit):,}" for limit in sorted(done.max_context.dropna().unique()))
    cells = int((done.num_jobs_dropped > 0).sum())
    report.paragraph(f"--max-context {limits} tokens dropped {int(done.num_jobs_dropped.sum()):,} jobs whole (a request "
                     f"longer than that) from {cells} done cells' schedules; every number below is without them "
                     "(per cell: num_jobs_dropped in the summary).")  # fmt: skip


def _capacity(report: ReportBuilder, data: SweepData) -> None:
    """First where the sweep has an SLO: each policy's capacity within it, the fleets a traffic needs and their
    cost (``sweeps/capacity.py``), and every done cell against it."""
    judged = capacity.slo_per_cell(data.summary)
    found = pd.read_csv(data.files.capacity) if data.files.capacity.exists() else None
    if found is None and not len(judged):
        return
    report.heading("Capacity under the SLO")
    report.paragraph("A cell meets the SLO when every target's statistic is within its limit at the worse end of its "
                     "95% interval over every job of its trials (a percentile's from the jobs' order statistics: too "
                     "few jobs bound none, and the cell is then unsure); a job that did not complete counts as a miss. A "
                     "job is good when it completed within every limit; goodput is the good share of the offered load. "
                     "The capacity is the highest load met with confidence below the first load searched that was not "
                     "(the true capacity lies between the two); a load where a trial failed or hung is not met. It "
                     "assumes meeting the SLO is monotone in load: a load met above the first not met is listed "
                     "(non_monotone_jps), not counted; a load whose jobs could not bound the SLO's percentiles gives "
                     "no verdict either way (too_few_jobs_jps).")  # fmt: skip
    if found is not None:
        fleet = pd.read_csv(data.files.fleet) if data.files.fleet.exists() else None
        said = capacity.sentences(found, fleet) + [line for line in [capacity.cheapest(found, fleet)] if line]
        report.paragraph(" ".join(said))
        report.table("capacity", f"Per GPU type and policy: capacity (JPS) at {found.slo.iloc[0]}, the first load "
                     "not met, goodput and cost per thousand jobs there, and how it was found",
                     capacity.capacity_table(found), "capacity.csv")  # fmt: skip
        if fleet is not None:
            report.table("fleet", "Replicas needed for the target traffic, per policy and router (each size checked by "
                         "simulating it at the target; first_guess: the target over one replica's capacity)",
                         capacity.fleet_table(fleet), "fleet.csv, simulated")  # fmt: skip
    if len(judged):
        report.table("slo_cells", "Every done cell against the SLO: met, missed or unsure at 95%, goodput (JPS) with "
                     "its interval", judged, data.provenance(data.done))  # fmt: skip


def _verdicts(report: ReportBuilder, data: SweepData) -> pd.DataFrame:
    """Which policy wins where, beyond the uncertainty (analysis/verdicts.py says how); the per-policy
    statistics behind the verdicts, for the GPU sections."""
    if not len(data.done):
        return pd.DataFrame(columns=["gpu", "policy"])
    records = cell_records(data.files)
    found, per_policy = verdicts(data.summary, records, sim_errors(data.summary))
    predictions = pd.read_csv(data.files.predictions) if data.files.predictions.exists() else None
    bases = []
    if predictions is not None:  # every comparison once: the verdict that stands, and what it rests on
        whole = read_summary(data.files.summary)
        predicted_found, _ = verdicts(whole[whole.engine == "sim"], records, sim_errors(whole))
        bases = predicted.verdict_bases(predicted_found + [v for v in found if v.engine != "sim"], predictions, whole)
        found = predicted.standing_verdicts(bases, found)
    table = verdict_frame(found)
    report.heading("Verdicts")
    if bases:
        report.figure("Winner per load and DRAM budget, by GPU, each square's verdict the one that stands: measured "
                      "where every policy was measured, else predicted (labelled; shade: margin over the closest rival; "
                      "grey: a tie; hatched: a trade-off)", plots.verdict_map(found, {b.point: b.rests_on for b in bases}))  # fmt: skip
    else:
        report.figure("Winner per load and DRAM budget, by GPU (shade: margin over the closest rival; grey: a tie; "
                      "hatched: a trade-off)", plots.verdict_map(found))  # fmt: skip
    trials = int(table.num_trials.max()) if len(table) else 0
    report.paragraph(
        "A winner beats every other policy by at least 1% at the lower end of a 95% interval; otherwise the "
        "policies are tied, or, where a faster policy lost jobs that the leader completed, they trade speed for "
        "completed jobs. Timed-out jobs count at the time they were cut. Beside each verdict, the KV regime each "
        "policy's cells measured (kv_regimes): pressure where the pool could not hold every job's context (later turns "
        "lost their prefix, requests were preempted, pins gave way, or the CPU tier served), else fits; a load's regime "
        "moves with the machine's speed, so a verdict is read with the regime its cells were in. "
        + ("One trial per cell: the intervals are over its jobs and cannot show run-to-run spread (use --trials)."
           if trials <= 1 else f"Up to {trials} trials per cell: intervals over trials (Student t).")
    )  # fmt: skip
    trade_offs = [verdict for verdict in found if verdict.kind is VerdictKind.TRADE_OFF]
    if trade_offs:
        report.paragraph("Trade-offs, not ties: " + "; ".join(f"{v.where}: {v.in_words()}" for v in trade_offs) + ".")
    provenance = data.provenance(data.done)
    report.table(Path(VERDICTS_FILE).stem, "Winner per GPU, DRAM budget and load, with its margin over the closest "
                 "rival (%)", table, provenance)  # fmt: skip
    changes = flips(found)
    if len(changes):
        report.table("flips", "Where the verdict changes between adjacent loads", changes, provenance)
    report.table("policy_stats", "Per policy: mean job time (timed-out jobs at their cut) with its 95% interval, its "
                 "tail, completion, timeouts, errors, preemptions and TTFT",
                 per_policy.drop(columns=_turn_columns(per_policy)), provenance)  # fmt: skip
    if predictions is not None:
        _measured_and_predicted(report, data, predictions, bases, whole)
    return per_policy


def _measured_and_predicted(report: ReportBuilder, data: SweepData, predictions: pd.DataFrame,
                            bases: list[predicted.Basis], whole: pd.DataFrame) -> None:  # fmt: skip
    """A sweep predicted before it was measured: what each verdict rests on, each measured cell against its
    prediction, and the simulator's held-out error per GPU type."""
    errors = predicted.prediction_errors(predictions, whole)
    report.heading("Measured and predicted")
    version = predictions.sim_version.iloc[0] if len(predictions) else "?"
    report.paragraph(f"Every real cell has a prediction by the simulator ({version}, predictions.csv); "
                     f"{len(errors)} of {len(predictions)} are measured. A verdict rests on measured "
                     "cells where every policy of its comparison was measured, on predictions where none was, and on "
                     "both where some were: it is then the prediction's, and the measured cells check their part of "
                     "it. The error per GPU type is held out: it counts only the cells whose attempt started after "
                     "their prediction was made; a cell measured before it, or of an unknown order, is listed with "
                     "held_out false and left out of it.")  # fmt: skip
    report.table("verdict_basis", "Per comparison: what its verdict rests on, the verdict that stands, the predicted "
                 "one beside it, and the policies measured and still open", predicted.basis_table(bases),
                 "predictions.csv, summary.parquet")  # fmt: skip
    if len(errors):
        report.table("sim_error_by_gpu", "The simulator's held-out error per GPU type (mean job time, predicted - "
                     "measured, % of measured) over the cells it rests on (cells; left_out: measured, not held out): "
                     "RMS, mean (bias), worst, and the share within the band",
                     predicted.error_by_gpu(errors), "measured cells against their predictions")  # fmt: skip
        report.table("prediction_errors", "Each measured cell: its prediction with the simulator's band, the "
                     "measurement, and the error", errors, "measured cells against their predictions")  # fmt: skip


def _simulator(report: ReportBuilder, data: SweepData) -> None:
    """Where the sweep simulated GPU cells: each engine stack they ran, what it was fitted on, and its error per policy
    on runs left out of its fit, which a simulated verdict must clear."""
    stacks = sim_stacks(data.summary)
    if not stacks:
        return
    report.heading("The simulator")
    report.paragraph("Simulated GPU cells run an engine stack's calibration (--sim-stack; docs/simulator.md): "
                     + "; ".join(f"{name}, fitted on {get_stack(name).fitted_on()}" for name in stacks) + ". Each "
                     "policy's error below is the band a simulated verdict must clear (with the GPU type's, where no "
                     "run of the stack measured that type); a policy the stack never measured takes the largest.")  # fmt: skip
    rows = [{"stack": name, "policy": policy, "error_pct": round(error * 100, 1)}
            for name in stacks for policy, error in sorted(get_stack(name).errors().policies.items())]  # fmt: skip
    report.table("sim_stacks", "Per engine stack and policy: the simulator's error of mean job time, % (for a fitted "
                 "stack, RMS over the GPU cells of runs left out of its fit)", pd.DataFrame(rows),
                 "sim/stacks.py, the stacks' files")  # fmt: skip


def _routing(report: ReportBuilder, data: SweepData) -> None:
    """Which KV policy with which router, for cells of several replicas (the verdicts above compare each policy with
    each router as one arm)."""
    routed = tables.policy_router(data.summary)
    if not len(routed):
        return
    report.heading("Policies and routers")
    report.paragraph("Cells of several replicas behind a router. A job's KV lives on the replica that served its last "
                     "turn: prefix kept is the share of their best possible prefix the later turns found cached, turns "
                     "moved the share of them the router sent to another replica. Continuum's pins under a router "
                     "that moves turns are held for a next turn that lands elsewhere (see the pin outcomes).")  # fmt: skip
    report.table("policy_router", "Per KV policy and router: mean job time (s), prefix kept (%), turns moved (%)",
                 routed, data.provenance(data.done))  # fmt: skip
    report.figure("Mean job time per KV policy and router", plots.policy_router(routed, "policy x router"))


def _ranks(report: ReportBuilder, data: SweepData) -> None:
    """What each rank of a tensor-parallel replica held, where the sweep has such cells."""
    if not (data.summary.tp > 1).any() or not len(data.done):
        return
    shapes = data.done.drop_duplicates(["gpu_type", "tp", "dram_gb", "kv_policy"])  # policies' tiers differ
    cells = [read_cell_json(data.files.cell(key).config).cell for key in shapes.cell_key]
    report.heading("What each rank holds")
    report.paragraph("A replica of tp GPUs splits the weights and every token's KV heads over its ranks; the DRAM "
                     "budget is the replica's, which vLLM's offload and LMCache split per rank. The sizing library's "
                     "figures; each real cell's cell.json has the pool vLLM sized.")  # fmt: skip
    report.table("ranks", "Per GPU type, degree, DRAM budget and the policies of one CPU tier: weights (GB) and KV pool "
                 "(GiB) per rank, the pool's tokens, the CPU tier (GiB) per rank", tables.rank_holdings(cells),
                 "the sizing library")  # fmt: skip


def _serve_cost(report: ReportBuilder, data: SweepData) -> None:
    """Ray Serve's own cost: one replica through Serve against the same cell direct (``--serve-overhead``)."""
    costs = tables.serve_cost(data.summary)
    if not len(costs):
        return
    report.heading("What Ray Serve adds")
    report.paragraph("The same one-replica cell sent directly to its engine and through Ray Serve (proxy, ingress, the "
                     "rules' request router, the engine replica streaming through), in the same run. Ratios above 1 "
                     "are Serve's cost; cells of several replicas pay it too.")  # fmt: skip
    report.table("serve_cost", "Per cell: latency and job time direct, through Serve, and through Serve over direct",
                 costs, data.provenance(data.done))  # fmt: skip


def _turn_columns(frame: pd.DataFrame) -> list[str]:
    return [column for column in frame.columns if re.fullmatch(r"T\d+ (mean|p90)", str(column))]


def _overview(report: ReportBuilder, data: SweepData) -> None:
    missing = tables.missing_cells(data.summary)
    if len(missing):
        report.heading("Missing cells")
        report.table("missing", f"{len(missing)} cells without a result", missing, "cells of the grid, not numbers")
    if len(data.done):
        report.heading("Across GPUs")
        report.table("cross_gpu", "Where each policy wins (lowest mean JCT) and its peak advantage (%)",
                     tables.cross_gpu_summary(data.summary), data.provenance(data.done))  # fmt: skip


def _gpu_section(report: ReportBuilder, data: SweepData, gpu: str, per_policy: pd.DataFrame,
                 progress: Callable[[str], None]) -> None:  # fmt: skip
    cells = data.summary[data.summary.gpu == gpu]
    done = cells[cells.status == CellStatus.DONE.value]
    provenance = data.provenance(done) if len(done) else "no cell of this GPU type has run yet"
    slug = _slug(gpu)
    report.heading(f"{gpu}")
    jct = tables.jct_table(data.summary, gpu)
    report.table(f"jct_{slug}", f"{gpu}: mean JCT (s) per policy; winner and its advantage over the best other (%)",
                 jct, provenance)  # fmt: skip
    if not len(done):
        return
    policies = list(dict.fromkeys(cells.policy))
    of_gpu = per_policy[per_policy.gpu == gpu]
    report.figure(f"{gpu}: mean job time against load, timed-out jobs at their cut (bars: 95% interval)",
                  plots.jct_vs_jps(of_gpu, policies, f"{gpu}: mean job time"))  # fmt: skip
    turn_tails = of_gpu[["policy", "dram_gb", "jps", *_turn_columns(of_gpu)]]
    report.table(f"turn_tails_{slug}", f"{gpu}: latency per turn (s), mean and p90", turn_tails, provenance)
    latency = tables.per_turn_latency(data.summary, data.turns, gpu)
    report.table(f"per_turn_latency_{slug}", f"{gpu}: mean latency per turn (s) and the last turn's over the first's",
                 latency, provenance)  # fmt: skip
    report.figure(f"{gpu}: per-turn latency", plots.per_turn_curves(latency, f"{gpu}: latency per turn"))
    cached = tables.cached_per_turn(data.summary, data.turns, gpu)
    report.table(f"cached_per_turn_{slug}", f"{gpu}: prefix-cache hit per turn (cached_) and theoretical best (best_)",
                 cached, provenance, percent=("cached_", "best_"))  # fmt: skip
    report.figure(f"{gpu}: cached fraction per turn (dotted: best)", plots.cached_curves(cached, f"{gpu}: prefix hits"))
    report.table(f"health_{slug}", f"{gpu}: jobs, timeouts, errors and client dispatch lag",
                 tables.health(data.summary, gpu), provenance)  # fmt: skip
    def requests_of(key: str) -> pd.DataFrame:
        return pd.read_parquet(data.files.cell(key).requests)

    by_context = tables.latency_by_context(data.summary, requests_of, gpu)
    report.table(f"latency_by_context_{slug}", f"{gpu}: latency (s) and prefix hit by prompt size (tokens)", by_context,
                 provenance, percent=("cached_",))  # fmt: skip
    pins = tables.pin_outcomes(data.summary, gpu)
    if len(pins):
        report.table(f"pin_outcomes_{slug}", f"{gpu}: Continuum's pins: carried to the next turn, expired before it, "
                     "gave way, or held for a job that never came back (% of pins; KV held in vain, block-seconds; "
                     "mean tool time, s)", pins, provenance)  # fmt: skip
        report.figure(f"{gpu}: what became of the pins", plots.pin_outcomes(pins, f"{gpu}: pin outcomes"))
    tier = tables.cpu_tier_diagnosis(data.summary[data.summary.gpu == gpu], data.turns, data.tool_time_s)
    if len(tier):
        report.table(f"cpu_tier_{slug}", f"{gpu}: does the CPU tier read back what it writes? (retention clock)",
                     tier, provenance, percent=("read_per_write", "external_hit_rate"))  # fmt: skip
    _cells_in_detail(report, data, gpu, done, progress)


def _cells_in_detail(report: ReportBuilder, data: SweepData, gpu: str, done: pd.DataFrame,
                     progress: Callable[[str], None]) -> None:  # fmt: skip
    """A page for each arm's cell at the top load, and the links to them."""
    top = done[done.jps == done.jps.max()]
    detailed = top.drop_duplicates(["policy", "replicas"])  # an arm (a policy @ a router) may run at several counts
    links = []
    for number, cell in enumerate(detailed.itertuples(), 1):
        label = _detail_label(cell)
        progress(f"{gpu}: cell {number} of {len(detailed)} in detail: {label}")
        routed = f"_x{cell.replicas}" if cell.replicas > 1 else ""
        slug = f"{_slug(gpu)}_{_slug(cell.policy)}{routed}"
        page = ReportBuilder(report.out_dir, f"{CELL_PAGES_DIR}/{slug}.html")
        page.heading(label, 1)
        _cell_detail(page, data, cell, slug)
        page.write(f"kvsweep report: {data.name}: {label}")
        links.append((page.page, label))
    if links:
        report.heading(f"{gpu}: cells in detail", 3)
        report.paragraph("Each on its own page: KV lifecycle of the median job, per replica where there are several, "
                         "and the engine's steps over time.")  # fmt: skip
        report.links(links)


def _detail_label(cell) -> str:
    """The cell as the report names it: its arm (a routed cell's policy names its router) and replicas."""
    return f"{cell.gpu} {cell.policy}{f' x{cell.replicas}' if cell.replicas > 1 else ''} at {cell.jps:g} JPS"


def _cell_detail(report: ReportBuilder, data: SweepData, cell, slug: str) -> None:
    """KV lifecycle of the median job and the step timeline of one cell."""
    files = data.files.cell(cell.cell_key)
    trace_path = files.trace_to_read()
    trace = pd.DataFrame() if trace_path is None else trace_file_frame(trace_path, EVENT_KINDS)
    jobs, requests = pd.read_parquet(files.jobs), pd.read_parquet(files.requests)
    replicas = tables.per_replica(requests, trace)
    if len(replicas):
        report.table(f"per_replica_{slug}", f"{_detail_label(cell)}: per replica, requests "
                     "(failed), later turns (moved in from another replica), prefix kept (%), pins (expired)",
                     replicas, data.provenance(data.done))  # fmt: skip
    completed = jobs[jobs.jct_s.notna()].sort_values("jct_s")
    if len(completed):
        job = completed.iloc[len(completed) // 2]
        lifecycle = tables.kv_lifecycle(requests, trace, job.job_id)
        report.table(f"kv_lifecycle_{slug}", f"{_detail_label(cell)}: KV lifecycle of job "
                     f"{job.job_id} (median JCT, {job.jct_s:.2f} s)", lifecycle, data.provenance(data.done),
                     percent=("best_fraction", "hit_fraction"))  # fmt: skip
    bins = step_bins(trace_path) if trace_path is not None else pd.DataFrame()
    if len(bins):
        title = f"{_detail_label(cell)}: engine steps"
        report.figure(f"{title} ({NUM_BINS} bins over the run)", plots.step_timeline(bins, title))


def _comparison(report: ReportBuilder, a: SweepData, b: SweepData) -> None:
    report.heading(f"{a.name} against {b.name}")
    for gpu in sorted(set(a.gpus) & set(b.gpus)):
        left = tables.jct_table(a.summary, gpu).drop(columns=["winner", "advantage_pct"])
        right = tables.jct_table(b.summary, gpu).drop(columns=["winner", "advantage_pct"])
        keys = [column for column in ("dram_gb", "jps") if column in left and column in right]
        merged = left.merge(right, on=keys, how="outer", suffixes=(f" ({a.name})", f" ({b.name})"))
        merged = merged.rename(columns={c: f"{c} ({a.name})" for c in left.columns if c not in keys and c not in right})
        report.table(f"compare_jct_{_slug(gpu)}", f"{gpu}: mean JCT (s), {a.name} beside {b.name}", merged,
                     f"{a.name}: {a.provenance()}; {b.name}: {b.provenance()}")  # fmt: skip


def _plain_number(value: float) -> str:
    """Three significant digits, without exponents: 1630 s reads as 1,630, not 1.63e+03."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) >= 0.001 or value == 0 else f"{value:.1e}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", str(text)).strip("-").lower()


def parser() -> argparse.ArgumentParser:
    p = command_parser("report", __doc__)
    p.add_argument("sweep_dir", type=Path, help="a sweep's results directory, DIR/<sweep>")
    p.add_argument("--compare", type=Path, help="a second sweep's directory, shown side by side")
    p.add_argument("--out", type=Path, help="output directory (default: DIR/<sweep>/report)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        for directory in (args.sweep_dir, args.compare):  # before the first progress line: bad input is one line
            if directory is not None:
                sweep_files(directory)
        path = build_report(args.sweep_dir, args.out, args.compare)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
