"""Command line: the pressure plan's predictions, written before a GPU runs it, and its measurement beside them after.

    python -m orchestrator.cli.pressure predict --gpus H100 H200 --out docs/gpu-runs/pressure-predictions.json
    python -m orchestrator.cli.pressure compare docs/gpu-runs/pressure-predictions.json OUT/evidence.json [...]

``predict`` runs every cell of the plan (``evidence.pressure``: the sizing's load, pool and tier for each GPU type)
in the simulator, as a sweep's worker runs a simulated cell, and writes each cell's figures, its regime, the
simulator's error band, the margins against fcfs and the predicted winner as JSON, with a Markdown page beside it.
``compare`` reads the evidence run's ``evidence.json`` (its pressure stage) and prints, per cell, the prediction
beside the measurement with each error, whether the mean JCT fell inside the band, and whether the winner matched;
with ``--write-errors`` it writes the RMS error of mean JCT per policy over every evidence file given as the
simulator's ``gpu_pressure`` error source (``sim/error_bands.py``), which widens the bands its verdicts must clear.
Bad input fails before anything runs, with one line naming the value.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path

from orchestrator.budget.cost import START_SLACK, CostModel
from orchestrator.evidence.pressure import (
    BASELINE,
    PRESSURE_POLICIES,
    CellComparison,
    CellFacts,
    cell_facts,
    compare,
    comparison_table,
    margins,
    pressure_cells,
    pressure_point,
    simulated,
    winner,
)
from orchestrator.gpus import GPU_TYPES
from orchestrator.inputs.parser import command_parser
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.models.served import Weights
from orchestrator.sim.error_bands import write_errors
from orchestrator.sim.stacks import DEFAULT_STACK, SOURCE_STUDY, get_stack, stack_names
from orchestrator.sim.version import sim_version
from orchestrator.sweep.planning.preflight import preflight
from orchestrator.sweep.planning.spec import RunLimits
from orchestrator.sweep.runtime.worker import CellWorker


def parser() -> argparse.ArgumentParser:
    p = command_parser("pressure", __doc__)
    commands = p.add_subparsers(dest="command", required=True)
    predict = commands.add_parser("predict", help="the plan's cells in the simulator, written as JSON and Markdown")
    predict.add_argument("--gpus", nargs="+", default=["H100", "H200"], help="GPU types of the catalogue")
    predict.add_argument("--model", default=LLAMA_8B, help=f"default: {LLAMA_8B}")
    predict.add_argument("--sim-stack", default=DEFAULT_STACK, choices=stack_names(),
                         help=f"the engine stack the simulator predicts (sim/stacks.py); default: {DEFAULT_STACK}")
    predict.add_argument("--out", type=Path, required=True, help="the JSON file; the Markdown page goes beside it")
    found = commands.add_parser("compare", help="an evidence run's pressure cells beside their predictions")
    found.add_argument("predictions", type=Path, help="the JSON file predict wrote")
    found.add_argument("evidence", type=Path, nargs="+", help="evidence runs' evidence.json files")
    found.add_argument("--write-errors", action="store_true",
                       help="write the RMS error of mean JCT per policy as the simulator's gpu_pressure error source")
    return p


def predictions(gpu: str, model: str, stack: str = DEFAULT_STACK) -> dict:
    """The plan on ``gpu``, every cell simulated with the engine stack ``stack``: the point, and per policy its regime,
    figures and band (the stack's)."""
    point = pressure_point(gpu, model)
    cells = pressure_cells(point, PRESSURE_POLICIES, model, Weights.DUMMY)
    worker, errors = CellWorker(), get_stack(stack).errors()
    outcomes = {cell.policy: worker.run(simulated(cell, stack), RunLimits()) for cell in cells}
    facts = {cell.policy: cell_facts(cell, outcomes[cell.policy]) for cell in cells}
    spans = sum(f.span_s or 0.0 for f in facts.values())
    measured = CostModel().shipped(gpu)
    starts = measured.first_s + (len(cells) - 1) * measured.later_s * START_SLACK
    return {
        "gpu": gpu, "model": model, "sim_stack": stack, "sim_version": sim_version(stack), "point": asdict(point),
        "seed": cells[0].seed, "window_s": point.window_s,
        "cells": {cell.policy: {"regime": (regime := preflight(cell).regime) and regime.value, "cell_key": cell.key,
                                "band": errors.cell_band(gpu, cell.policy), **facts[cell.policy].as_dict()}
                  for cell in cells},
        "margins": {m.policy: m.predicted_pct for m in margins(outcomes, facts)},
        "winner": winner(facts),
        "budget": {"starts": len(cells), "start_s": starts, "spans_s": spans, "resets_s": len(cells) * measured.reset_s,
                   "first_start_s": measured.first_s, "later_start_s": measured.later_s},
    }  # fmt: skip


def predictions_markdown(plans: list[dict]) -> str:
    lines = ["# The pressure plan's predictions", "",
             "Written by `python -m orchestrator.cli.pressure predict` before the GPU runs the plan, so that the "
             "measurement is a held-out test of the simulator. Each cell is the source study's workload (8 turns, "
             "20-token answers, 0.5 s tool calls) with Llama-3.1-8B's shape, seed 42.", ""]  # fmt: skip
    for plan in plans:
        point, budget = plan["point"], plan["budget"]
        pool_tokens = point["kv_blocks"] * point["block_size"]
        lines += [f"## {plan['gpu']} (simulated, {plan.get('sim_stack', SOURCE_STUDY)})", "",
                  f"{point['jps']:g} JPS over {point['window_s']:g} s, a pool of {point['kv_blocks']:,} blocks of "
                  f"{point['block_size']} ({pool_tokens:,} tokens), a {point['dram_gb']:g} GiB CPU tier, max_num_seqs "
                  f"{point['max_num_seqs']}; the sizing's estimate: live {point['live_tokens'] / 1e3:,.0f}K, corpus "
                  f"{point['corpus_tokens'] / 1e3:,.0f}K tokens, offered load {point['offered_load']:.2f}.", "",
                  "| policy | regime | mean JCT (band) | p90 JCT | TTFT p50 | span | GPU prefix share | "
                  "CPU tier served (share of looked up) | stored to tier | preemptions | vs fcfs |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for policy, cell in plan["cells"].items():
            facts = CellFacts.of_dict(cell)
            tier = ("-" if facts.tier_hit_tokens is None else
                    f"{facts.tier_hit_tokens:,.0f} ({facts.tier_served_share or 0:.0%})")  # fmt: skip
            stored = "-" if facts.tier_stored_tokens is None else f"{facts.tier_stored_tokens:,.0f}"
            margin = plan["margins"].get(policy)
            figures = [cell["regime"], f"{facts.jct_mean_s:.2f} s (±{cell['band']:.0%})", f"{facts.jct_p90_s:.2f} s",
                       f"{facts.ttft_p50_s:.2f} s", f"{facts.span_s:.1f} s", f"{facts.gpu_hit_share or 0:.0%}", tier,
                       stored, str(facts.preemptions), "-" if margin is None else f"{margin:+.1f}%"]  # fmt: skip
            lines.append(f"| {policy} | " + " | ".join(figures) + " |")
        lines += ["", f"Predicted winner: **{plan['winner']}**. The plan needs {budget['starts']} server starts (one "
                  f"per policy): about {budget['start_s']:.0f} s with the measured starts of the type "
                  f"({budget['first_start_s']:g} s first, {budget['later_start_s']:g} s later, with a fifth more), "
                  f"{budget['spans_s']:.0f} s of load and {budget['resets_s']:.0f} s of reset proofs.", ""]  # fmt: skip
    return "\n".join(lines)


def comparison_rows(predicted: dict, evidence: dict) -> tuple[dict, list[CellComparison]]:
    """The plan predicted for the evidence's GPU, and its pressure cells beside their predictions."""
    gpu = evidence["header"]["target"]
    plans = {plan["gpu"]: plan for plan in predicted["plans"]}
    if gpu not in plans:
        raise ValueError(f"the evidence ran on {gpu!r}; the predictions are for {', '.join(plans)}")
    measured = {stage["name"].removeprefix("pressure "): stage["facts"]["measured"] for stage in evidence["stages"]
                if stage["name"].startswith("pressure ") and stage.get("facts", {}).get("measured")}  # fmt: skip
    return plans[gpu], compare(plans[gpu]["cells"], measured)


def comparison_markdown(predicted: dict, evidence: dict) -> str:
    """The evidence's pressure cells beside the predictions for its GPU."""
    plan, rows = comparison_rows(predicted, evidence)
    verdict = next((stage["facts"] for stage in evidence["stages"] if stage["name"] == "pressure verdict"), {})
    lines = [comparison_table(rows), ""]
    for row in rows:
        within = row.jct_within_band
        error = row.error("jct_mean_s")
        lines.append(f"- {row.policy}: mean JCT error {error:+.0%} against a band of ±{row.band:.0%}: "
                     f"{'inside' if within else 'outside'}")  # fmt: skip
    for policy, margin in verdict.items():
        if policy == "winner":
            continue
        predicted_margin = plan["margins"].get(policy)
        measured = f"{margin['margin_pct']:+.1f}% [{margin['margin_lo_pct']:+.1f}, {margin['margin_hi_pct']:+.1f}]"
        said = "nothing (not in the plan's predictions)" if predicted_margin is None else f"{predicted_margin:+.1f}%"
        lines.append(f"- {policy} vs {BASELINE}: measured {measured}, predicted {said}")
    if len(rows) > 1:
        measured_winner = winner({row.policy: CellFacts.of_dict(row.measured) for row in rows})
        predicted_winner = winner({row.policy: CellFacts.of_dict(row.predicted) for row in rows})
        lines.append(f"- winner among these: measured {measured_winner}, predicted {predicted_winner}: "
                     f"{'matched' if measured_winner == predicted_winner else 'missed'}")  # fmt: skip
    return "\n".join(lines) + "\n"


def rms_errors(rows: list[CellComparison]) -> dict[str, float]:
    """Per policy, the RMS relative error of the predicted mean JCT over its measured cells."""
    errors: dict[str, list[float]] = {}
    for row in rows:
        if (error := row.error("jct_mean_s")) is not None:
            errors.setdefault(row.policy, []).append(error)
    return {policy: round(math.sqrt(sum(e * e for e in found) / len(found)), 4) for policy, found in errors.items()}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "predict":
            unknown = [gpu for gpu in args.gpus if gpu not in GPU_TYPES]
            if unknown:
                raise ValueError(f"unknown --gpus {', '.join(unknown)}; valid: {', '.join(GPU_TYPES)}")
            plans = [predictions(gpu, args.model, args.sim_stack) for gpu in args.gpus]
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"plans": plans}, indent=2) + "\n")
            page = predictions_markdown(plans)
            args.out.with_suffix(".md").write_text(page)
            print(page)
            return 0
        for path in (args.predictions, *args.evidence):
            if not path.is_file():
                raise ValueError(f"no file {path}")
        predicted = json.loads(args.predictions.read_text())
        rows = []
        for path in args.evidence:
            evidence = json.loads(path.read_text())
            print(f"## {path}\n\n{comparison_markdown(predicted, evidence)}")
            rows += comparison_rows(predicted, evidence)[1]
        if args.write_errors:
            errors = rms_errors(rows)
            write_errors("gpu_pressure", errors)
            print(f"the simulator's gpu_pressure errors written: {errors}")
        return 0
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
