"""Command line: a GPU's evidence in one command, its stages planned against a time budget, no Ray, no tracking.

    python -m orchestrator.cli.evidence --gpu H200 --out $OUT --budget-s 450           # on a GPU node
    python -m orchestrator.cli.evidence --gpu cpu --out results/evidence --budget-s 900  # the rehearsal here

Stages, in order, each timed:
1. doctor: the node's checks (tested stack, driver against CUDA, torch sees the GPU, vLLM and LMCache's compiled
   ops import);
2. one short cell per policy (by default fcfs and then policies, chosen greedily, that run every other registered
   mechanism: continuum, lmcache, native-offload, simple-offload, lmcache-disk) with the Llama-3.1-8B-shaped dummy model,
   each with its evidence (what the policy did, vLLM's KV pool against the sizing library, a proven-clean reset),
   the server's start split into its phases, and whether it ran eager or with CUDA graphs;
3. profile: the fcfs cell's scheduler trace as the GPU's rates (``orchestrator.sim.gpu_profile``), with the
   simulator's step-time error before and after;
4. source study: its low-load cells (1 and 3 JPS, fcfs and continuum) beside its published and simulated JCTs;
5. pressure: the pressure plan (``evidence.pressure``): fcfs, lmcache, native-offload and continuum where the GPU's
   KV pool overflows and a CPU tier must serve, each cell's regime and the simulator's prediction printed before it
   runs, then each measured beside its prediction, and each policy's JCT against fcfs over the same jobs;
6. capacity: cells at given loads on the pressure plan's pool and tier (``--capacity-cells``), each judged against an
   SLO (``--slo``; ``records.slo``) as measured and as the simulator predicts it: a capacity search's answer
   (``sweeps/capacity.py``, run where the predictions are made) measured at itself and above.

With ``--predict-only FILE`` nothing runs: every GPU cell of those stages is simulated with an engine stack
(``--sim-stack``) and written to FILE, to commit before the run; the run given ``--predictions FILE`` ends with each
measured cell beside its prediction and band (``evidence.held_out``).

A stage starts only when its estimate fits in the budget left (``evidence.budget``), else it is skipped with the
reason. After every stage the evidence is packed into ``--out`` as three files (``evidence.pack``), so a run cut
at its limit still returns every stage that finished; SIGTERM ends the stage in flight as cut and packs. On
``--gpu cpu`` the CUDA-only policies do not run: their stage builds their server's command line for a GPU and
says so. Bad input fails before anything starts, with one line naming the value.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import signal
import sys
import tempfile
from pathlib import Path

from pydantic import ValidationError

from orchestrator.capacity.plan import lowest_judgeable_jps
from orchestrator.cell.spec import CellSpec
from orchestrator.cli.cell import cell_from
from orchestrator.evidence.budget import Budget
from orchestrator.evidence.held_out import check_predicts, predictions_document, predictions_markdown, read_predictions
from orchestrator.evidence.measure import predicted_facts
from orchestrator.evidence.pack import PACKED_FILES, stage_table
from orchestrator.evidence.pressure import BASELINE, PRESSURE_POLICIES, pressure_cells, pressure_point, rehearsal_point
from orchestrator.evidence.pressure import WINDOW_S as PRESSURE_WINDOW_S
from orchestrator.evidence.run import BUILT_FOR_GPU, STAGES, EvidenceRun, Plan, PolicyCell
from orchestrator.evidence.stages import Cut
from orchestrator.gpus import CPU, GPU_TYPES, known_device_names
from orchestrator.inputs.parser import command_parser
from orchestrator.inputs.validation import one_line
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.models.served import Weights, served_model
from orchestrator.policies.catalog import POLICIES, get_policy, policies_covering_every_mechanism
from orchestrator.records.slo import Slo
from orchestrator.replica.vllm_server import vllm_server_command
from orchestrator.sim.stacks import DEFAULT_STACK, stack_names
from orchestrator.sweep.planning.serving import served_cell
from orchestrator.sweep.runtime.worker import CellWorker

EVIDENCE_POLICIES = policies_covering_every_mechanism("gpu")
CAPACITY_SLO = "jct_p90=30s"
SOURCE_STUDY = "fcfs:1,fcfs:3,continuum:1,continuum:3"  # its low-load cells, POLICY:JPS


def parser() -> argparse.ArgumentParser:
    p = command_parser("evidence", __doc__)
    p.add_argument("--gpu", required=True, help=f"this machine's GPU type, or cpu to rehearse on the CPU engine: "
                   f"{', '.join(known_device_names())}")  # fmt: skip
    p.add_argument("--out", type=Path, required=True, help="where the packed evidence goes (three files)")
    p.add_argument("--budget-s", type=float, required=True, help="seconds the whole run may take")
    p.add_argument("--work", type=Path, help="where each stage's files are written (default: a new temporary folder)")
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, in this order: {', '.join(STAGES)}")
    p.add_argument("--policies", default=",".join(EVIDENCE_POLICIES), help="the policies of the cells stage")
    p.add_argument("--model", help="default: the Llama-3.1-8B shape on a GPU, the tiny model on cpu")
    p.add_argument("--weights", choices=[weights.value for weights in Weights],
                   help="default: dummy on a GPU (no download), real on cpu (the tiny model's generated weights)")
    p.add_argument("--jps", type=float, default=1.0, help="the cells stage's load")
    p.add_argument("--duration-s", type=float, help="the cells stage's arrival window; default: 10 on a GPU, 3 on cpu")
    p.add_argument("--source-cells", default=SOURCE_STUDY, help="the source-study cells, comma-separated POLICY:JPS")
    p.add_argument("--source-duration-s", type=float,
                   help="the source-study cells' arrival window; default: the study's 45 s on a GPU, 5 on cpu")
    p.add_argument("--dram-gb", type=float, default=8.0, help="the CPU tier of lmcache and native-offload (GiB)")
    p.add_argument("--first-start-s", type=float, help="the first server start's estimate before one is measured "
                   "(default: the type's measured first start, orchestrator/data/starts.toml); a previous call's "
                   "measured start is a closer one")
    p.add_argument("--kv-blocks", help="fix the KV pool in blocks, or auto (kvsweep cell's default per device)")
    p.add_argument("--pressure-policies", default=",".join(PRESSURE_POLICIES), help="the pressure stage's policies, "
                   "in the order they run (the first is the baseline every other is compared with)")
    p.add_argument("--capacity-cells", default="", help="the capacity stage's cells, comma-separated POLICY:JPS, on "
                   "the pressure plan's pool and tier (its window: --pressure-window-s)")
    p.add_argument("--slo", default=CAPACITY_SLO, help=f"what the capacity stage judges each cell against; default: "
                   f"{CAPACITY_SLO}")
    p.add_argument("--pressure-window-s", type=float, help=f"the pressure cells' arrival window; default: "
                   f"{PRESSURE_WINDOW_S:g} on a GPU (the load and pool are the sizing's), the cells stage's on cpu "
                   "(and its load, pool and tier, so that its replica serves both)")  # fmt: skip
    p.add_argument("--sim-stack", default=DEFAULT_STACK, choices=stack_names(), help="the engine stack the simulator "
                   f"predicts each cell with (sim/stacks.py); default: {DEFAULT_STACK}")  # fmt: skip
    predicted = p.add_mutually_exclusive_group()
    predicted.add_argument("--predict-only", type=Path, metavar="FILE", help="run nothing: simulate every GPU cell the "
                           "same command runs and write the predictions to FILE (JSON, a Markdown page beside it), to "
                           "commit before the run")  # fmt: skip
    predicted.add_argument("--predictions", type=Path, metavar="FILE", help="the file --predict-only wrote for this "
                           "command: the run ends with each measured cell beside its prediction")  # fmt: skip
    return p


def plan_from(args: argparse.Namespace) -> Plan:
    """Raises ``ValueError`` or pydantic's ``ValidationError`` with what is wrong in the flags."""
    if args.gpu not in known_device_names():
        raise ValueError(f"unknown --gpu {args.gpu!r}; valid: {', '.join(known_device_names())}")
    if args.budget_s <= 0:
        raise ValueError(f"--budget-s {args.budget_s:g} is not positive; valid: the seconds the run may take")
    if args.first_start_s is not None and args.first_start_s <= 0:
        raise ValueError(f"--first-start-s {args.first_start_s:g} is not positive; valid: a start's seconds")
    stages = _names(args.stages, STAGES, "--stages")
    policies = _names(args.policies, tuple(POLICIES), "--policies")
    on_cpu = args.gpu == CPU
    duration = args.duration_s if args.duration_s is not None else (3.0 if on_cpu else 10.0)
    source_duration = args.source_duration_s if args.source_duration_s is not None else (5.0 if on_cpu else 45.0)
    weights = args.weights or (Weights.REAL.value if on_cpu else Weights.DUMMY.value)
    base = dict(gpu=args.gpu, model=args.model, weights=weights, dram_gb=0.0, scale=None, seed=42,
                request_timeout_s=300.0, job_timeout_s=600.0, kv_blocks=args.kv_blocks, block_size=None,
                gpu_memory_utilization=0.85, max_num_seqs=None)  # fmt: skip
    cells = []
    for policy in policies:
        dram_gb = get_policy(policy).dram_gb_taken(args.dram_gb)
        flags = argparse.Namespace(**{**base, "policy": policy, "jps": args.jps, "duration_s": duration, "dram_gb": dram_gb})
        if on_cpu and not get_policy(policy).runs_on(CPU):
            gpu_flags = {"gpu": BUILT_FOR_GPU, "model": None, "weights": Weights.DUMMY.value, "kv_blocks": None}
            cells.append(PolicyCell(policy, None, _server_command(cell_from(argparse.Namespace(**{**vars(flags),
                                                                                                  **gpu_flags})))))
        else:
            cells.append(PolicyCell(policy, cell_from(flags)))
    source = tuple(cell_from(argparse.Namespace(**{**base, "policy": policy, "jps": jps, "duration_s": source_duration}))
                   for policy, jps in _policy_loads(args.source_cells, "--source-cells"))  # fmt: skip
    point, pressure, capacity, slo = None, (), (), None
    if "pressure" in stages or "capacity" in stages:
        if (policies := _names(args.pressure_policies, tuple(POLICIES), "--pressure-policies"))[0] != BASELINE:
            raise ValueError(f"--pressure-policies {args.pressure_policies!r}: the first is the baseline; valid: "
                             f"{BASELINE} first, e.g. {','.join(PRESSURE_POLICIES)}")  # fmt: skip
        if on_cpu:
            cells_pool = cell_from(argparse.Namespace(**{**base, "policy": BASELINE, "jps": args.jps,
                                                         "duration_s": duration}))  # fmt: skip
            options, model = cells_pool.engine_options, cells_pool.model
            point = rehearsal_point(args.jps, args.pressure_window_s or duration, options.num_kv_blocks,
                                    options.block_size_on(CPU), args.dram_gb)  # fmt: skip
        else:
            model = args.model or LLAMA_8B
            point = pressure_point(args.gpu, model, args.pressure_window_s or PRESSURE_WINDOW_S)
        scale = cells_pool.workload.scale if on_cpu else 1.0
        if "pressure" in stages:
            pressure = _pressure_entries(pressure_cells(point, policies, model, Weights(weights), scale), on_cpu)
        if "capacity" in stages:
            slo = Slo.parse(args.slo)
            loads = _policy_loads(args.capacity_cells, "--capacity-cells")
            if on_cpu and (cuda := [policy for policy, _ in loads if not get_policy(policy).runs_on(CPU)]):
                raise ValueError(f"--capacity-cells: {', '.join(dict.fromkeys(cuda))} need(s) a CUDA GPU; on cpu "
                                 "valid: policies without a CUDA-only connector, e.g. fcfs, continuum")  # fmt: skip
            _check_judgeable(loads, point.window_s, slo, args.capacity_cells)
            capacity = tuple(cell.model_copy(update={"workload": cell.workload.model_copy(update={"jps": jps})})
                             for policy, jps in loads for cell in pressure_cells(point, [policy], model, Weights(weights), scale))  # fmt: skip
    return Plan(args.gpu, stages, tuple(cells), source, point, pressure, capacity, slo, args.sim_stack)


def _check_judgeable(loads: list[tuple[str, float]], window_s: float, slo: Slo, text: str) -> None:
    """Raises ``ValueError`` (one line) where a capacity cell's window expects too few jobs to bound the SLO's
    percentiles (``capacity.plan.lowest_judgeable_jps``): such a cell can never be met, and its GPU time buys no
    verdict."""
    lowest = lowest_judgeable_jps(slo, window_s, 1)
    short = [(policy, jps) for policy, jps in loads if lowest is not None and jps < lowest]
    if short:
        policy, jps = min(short, key=lambda load: load[1])
        raise ValueError(f"--capacity-cells {text!r}: {policy}:{jps:g} over a {window_s:g} s window expects about "
                         f"{jps * window_s:.0f} jobs, too few to bound {slo}'s percentiles; valid: loads from "
                         f"{lowest:.3g} JPS, or --pressure-window-s {math.ceil(lowest * window_s / jps)} or more")  # fmt: skip


def _pressure_entries(cells: tuple[CellSpec, ...], on_cpu: bool) -> tuple[PolicyCell, ...]:
    """The pressure cells; on cpu, each CUDA-only policy's as the server command the same cell runs on an H100."""
    cuda_only = [cell.policy for cell in cells if on_cpu and not get_policy(cell.policy).runs_on(CPU)]
    on_gpu = pressure_cells(pressure_point(BUILT_FOR_GPU, LLAMA_8B), cuda_only, LLAMA_8B, Weights.DUMMY)
    commands = {cell.policy: _server_command(cell) for cell in on_gpu}
    return tuple(PolicyCell(cell.policy, None, commands[cell.policy]) if cell.policy in commands
                 else PolicyCell(cell.policy, cell) for cell in cells)  # fmt: skip


def _policy_loads(text: str, flag: str) -> list[tuple[str, float]]:
    cells = []
    for item in (item.strip() for item in text.split(",") if item.strip()):
        policy, _, jps = item.partition(":")
        if policy not in POLICIES:
            raise ValueError(f"{flag} {item!r}: unknown policy {policy!r}; valid: {', '.join(POLICIES)}")
        try:
            cells.append((policy, float(jps)))
        except ValueError:
            raise ValueError(f"{flag} {item!r}: {jps!r} is not a JPS; valid: POLICY:JPS, e.g. {SOURCE_STUDY}") from None
        if not cells[-1][1] > 0:
            raise ValueError(f"{flag} {item!r}: a load must be positive; valid: POLICY:JPS, e.g. {SOURCE_STUDY}")
    return cells


def _names(text: str, valid: tuple[str, ...], flag: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in valid]
    if unknown or not names:
        raise ValueError(f"{flag} {text!r}: unknown {', '.join(unknown) or 'empty list'}; valid: {', '.join(valid)}")
    return names


def _server_command(cell: CellSpec) -> str:
    """The server command line ``cell`` would run (built, never started)."""
    engine = served_cell(cell, served_model(cell.model, cell.weights)).engine
    return shlex.join(vllm_server_command(engine, port=8000).argv)


def _on_sigterm(signum, frame) -> None:
    raise Cut()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        plan = plan_from(args)
    except (ValueError, ValidationError) as error:
        print(f"error: {one_line(error) if isinstance(error, ValidationError) else error}", file=sys.stderr)
        return 2
    command = shlex.join(["python", "-m", "orchestrator.cli.evidence", *(argv if argv is not None else sys.argv[1:])])
    if args.predict_only is not None:
        return _predict_only(plan, args.predict_only, command)
    try:
        predictions = read_predictions(args.predictions) if args.predictions else []
        if args.predictions:
            check_predicts(predictions, plan.gpu_cells(), args.predictions)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="kvsweep-evidence-"))
    work.mkdir(parents=True, exist_ok=True)
    budget = Budget(args.budget_s, plan.target, args.first_start_s)
    print(f"evidence for {plan.target} in at most {args.budget_s:.0f} s: stages {', '.join(plan.stages)}; "
          f"files in {work}, packed into {args.out}", flush=True)  # fmt: skip
    run = EvidenceRun(plan, budget, work, args.out, command, predictions)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        stages = run.run()
    except Cut:
        stages = run.stages
        print("cut by SIGTERM: the evidence of every finished stage is packed", file=sys.stderr)
    print("\n" + stage_table(stages), flush=True)
    print(f"evidence packed in {args.out}: {', '.join(PACKED_FILES)}", flush=True)
    return 1 if any(stage.status in ("failed", "cut") for stage in stages) else 0


def _predict_only(plan: Plan, path: Path, command: str) -> int:
    """Every GPU cell of ``plan`` simulated, written to ``path`` with its page beside it; nothing runs."""
    named = plan.gpu_cells()
    if not named:
        print(f"error: --predict-only: this command runs no cell on a GPU type the simulator knows ({plan.target}); "
              f"valid: --gpu {', '.join(GPU_TYPES)}", file=sys.stderr)  # fmt: skip
        return 2
    print(f"predicting {len(named)} cells with the {plan.sim_stack} stack", flush=True)
    worker = CellWorker(node_id="predictions")
    document = predictions_document([(name, cell, predicted_facts(worker, cell, plan.sim_stack))
                                     for name, cell in named], plan.sim_stack, command)  # fmt: skip
    worker.shutdown()
    path.parent.mkdir(parents=True, exist_ok=True)
    page = predictions_markdown(document)
    path.write_text(json.dumps(document, indent=2) + "\n")
    path.with_suffix(".md").write_text(page)
    print(page + f"\nwritten: {path} and {path.with_suffix('.md')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
