"""The command line every script in ``sweeps/`` shares: the script supplies its grid, flags override it. Its usage
and help read ``kvsweep sweep NAME`` and its description is the script's docstring, run either way.

    kvsweep sweep cpu_tiny [--engine auto|vllm|sim|fake] [--results-dir DIR] [--tracking-uri URI]
        [--gpus H100,A100] [--policies fcfs,continuum] [--jps 1,3,6] [--dram-gb 400] [--seeds 42] [--trials N]
        [--duration-s F] [--scale F] [--workload source-study|parametric|trace] [--trace PATH] [--load M,...]
        [--turns D] [--tool-tokens D] [--output-tokens D] [--tool-time-s D] [--model NAME] [--weights real|dummy]
        [--kv-blocks N]
        [--max-num-seqs N] [--max-model-len N] [--max-context N] [--gpu-memory-utilization F] [--tp 1,4]
        [--max-attempts N] [--cell-timeout-s F] [--hang-timeout-s F] [--start-stall-s F] [--client-actors N]
        [--ray-address ADDR] [--slo jct_p90=60s,...] [--gpu-budget 2h|H100=2h,...] [--name NAME] [--dry-run]
        [--rerun]

Lists take commas or spaces. ``D`` is a number, a preset distribution's name or a distribution as JSON
(``workload/distributions.py``). Bad input is one ``error:`` line and exit code 2, before Ray or the
tracking store is touched; a bad value is named by the flag that gave it (``--dram-gb -5: ...``), not by the field of
the spec it set (``FLAG_OF_FIELD``).
"""

from __future__ import annotations

import argparse
import ast
import errno
import os
import sys
from collections.abc import Collection, Mapping
from pathlib import Path

from pydantic import ValidationError

from orchestrator.budget.gpu_budget import GpuBudget
from orchestrator.cell.spec import EngineKind
from orchestrator.gpus import CPU
from orchestrator.inputs.parser import command_parser
from orchestrator.inputs.validation import InputError, flag_line, one_line
from orchestrator.models.served import Weights
from orchestrator.paths import sweeps_dir
from orchestrator.records.slo import Slo
from orchestrator.routing.rules import RouterKind
from orchestrator.sim.stacks import stack_names
from orchestrator.sweep.planning.options import SweepOptions
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.workload.distributions import PRESETS, Distribution, Fixed, parse_distribution
from orchestrator.workload.schedule import schedule_for
from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.traces.schema import TraceFormatError, TraceRef, load_trace

RESULTS_ENV = "KVSWEEP_RESULTS_DIR"
# Where Ray unpacks a job's --working-dir: results written under it vanish with the job.
RAY_WORKING_DIR_MARK = "runtime_resources"


_SOURCE_SHAPE = WorkloadSpec(jps=1)
# What ``--workload`` sets; a shape flag given beside it overrides its part.
WORKLOAD_SHAPES: dict[str, dict] = {
    "source-study": {field: getattr(_SOURCE_SHAPE, field) for field in ("num_turns", "tool_tokens", "output_tokens",
                                                                        "tool_time_s", "system_prompt_tokens")},
    "parametric": {"num_turns": PRESETS["agent-turns"], "tool_tokens": PRESETS["agent-tool-tokens"],
                   "output_tokens": PRESETS["agent-output-tokens"], "tool_time_s": PRESETS["swe-agent-tool-time"]},
}  # fmt: skip


# What each --engine runs (``planning.spec.EngineKind``; ``planning.cells.expand`` resolves auto per GPU type).
ENGINES: dict[str, str] = {
    EngineKind.AUTO.value: "real vLLM on the GPU types the Ray cluster has, the simulator for the others",
    EngineKind.VLLM.value: "real vLLM for every cell (its CPU build on cpu); the cells of a GPU type the cluster lacks "
                           "stay pending",
    EngineKind.SIM.value: "the simulator for every cell, on any CPU",
    EngineKind.FAKE.value: "a stand-in server with no model, for testing the orchestration (never a measurement)",
}  # fmt: skip
# The grid's lists, each set by the flag of its own name, item by item converted to the type.
LIST_FLAGS: dict[str, type] = {"gpus": str, "policies": str, "jps": float, "dram_gb": float, "seeds": int,
                               "replicas": int, "routers": str, "tp": int}  # fmt: skip
# The job shape's flags and the workload's fields they set (a number, a preset or a distribution).
SHAPE_FLAGS = {"turns": "num_turns", "tool_tokens": "tool_tokens", "output_tokens": "output_tokens",
               "tool_time_s": "tool_time_s"}  # fmt: skip
# Every other flag that sets a value of the spec, and the field it sets as a path in the spec.
VALUE_FLAGS: dict[str, tuple[str, ...]] = {
    "engine": ("engine",), "name": ("name",), "model": ("model",), "weights": ("weights",), "trials": ("trials",),
    "serve_overhead": ("serve_overhead",), "duration_s": ("workload", "duration_s"), "scale": ("workload", "scale"),
    "max_context": ("workload", "max_context"), "kv_blocks": ("engine_options", "num_kv_blocks"),
    "max_num_seqs": ("engine_options", "max_num_seqs"), "max_model_len": ("engine_options", "max_model_len"),
    "gpu_memory_utilization": ("engine_options", "gpu_memory_utilization"),
    "max_attempts": ("limits", "max_attempts"), "cell_timeout_s": ("limits", "cell_timeout_s"),
    "hang_timeout_s": ("limits", "hang_timeout_s"), "start_stall_s": ("limits", "start_stall_s"),
    "client_actors": ("limits", "client_actors"), "sim_stack": ("sim_stack",),
}  # fmt: skip
# Each field of the spec a flag sets, as pydantic's errors locate it, to the flag (its dest): a bad value is named by
# the flag the user typed.
FLAG_OF_FIELD: dict[tuple[str, ...], str] = {
    **{(flag,): flag for flag in LIST_FLAGS},
    **{("workload", field): flag for flag, field in SHAPE_FLAGS.items()},
    **{field: flag for flag, field in VALUE_FLAGS.items()},
}


def _shown(value: float | Distribution) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else value.kind


def running_sweep(spec: SweepSpec) -> str:
    """The name in ``sweeps/`` of the script this process runs (``python sweeps/NAME.py``), else ``spec``'s name."""
    running = Path(sys.argv[0])
    return running.stem if running.suffix == ".py" and running.parent.name == "sweeps" else spec.name


def sweep_doc(name: str) -> str:
    """The docstring of ``sweeps/NAME.py``, read without running the script; empty where there is none."""
    path = sweeps_dir() / f"{name}.py"
    return (ast.get_docstring(ast.parse(path.read_text())) or "") if path.is_file() else ""


def parser(spec: SweepSpec, command: str | None = None, doc: str | None = None, engines: Mapping[str, str] = ENGINES,
           hidden: Collection[str] = ()) -> argparse.ArgumentParser:
    """The flags every sweep takes, ``spec``'s grid their defaults: the parser of ``kvsweep COMMAND`` described by
    ``doc`` (``inputs.parser.command_parser``), or without a command of the script running (one that builds on the
    sweeps' flags). ``engines``: the ``--engine`` choices and what each runs; ``hidden``: flags (dests) the command
    refuses, left out of its help."""
    p = command_parser(command or "", doc)
    if command is None:
        p.prog = Path(sys.argv[0]).name
    _grid_flags(p, spec, engines, hidden)
    _workload_flags(p, spec, hidden)
    _engine_flags(p, spec)
    _run_flags(p, spec, hidden)
    return p


def _grid_flags(p: argparse.ArgumentParser, spec: SweepSpec, engines: Mapping[str, str],
                hidden: Collection[str]) -> None:
    """Where the cells run and the grid's axes."""
    p.add_argument("--engine", choices=list(engines), help="; ".join(f"{name}: {meaning}" for name, meaning in
                   engines.items()) + f"; default: {spec.engine.value}")  # fmt: skip
    p.add_argument("--sim-stack", choices=stack_names(), help="the engine stack whose calibration the simulated cells "
                   "of GPU types run (and a budget's predictions): source-study, fitted on the source study's runs of "
                   f"an older vLLM, or one fitted on this project's GPU runs (docs/simulator.md); default: "
                   f"{spec.sim_stack}")  # fmt: skip
    p.add_argument("--results-dir", type=Path, help=f"default: ${RESULTS_ENV}, else ./results (absolute paths are safest)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI; default: sqlite:///<results-dir>/mlflow.db")
    p.add_argument("--gpus", nargs="+", help=f"GPU types (Ray accelerator types) or cpu; default: {','.join(spec.gpus)}")
    p.add_argument("--policies", nargs="+", help=f"default: {','.join(spec.policies)}")
    p.add_argument("--jps", nargs="+", help=argparse.SUPPRESS if "jps" in hidden else
                   f"jobs per second; default: {','.join(f'{j:g}' for j in spec.jps)}")  # fmt: skip
    p.add_argument("--dram-gb", nargs="+", help="CPU DRAM budgets in GiB (2^30 bytes, as LMCache and vLLM read them), "
                   "for every GPU type (replaces per-GPU defaults)")
    p.add_argument("--replicas", nargs="+", help="replicas per cell, behind a router past one, as a Ray Serve application "
                   f"(on GPUs, --tp GPUs of the cell's type each); default: {','.join(map(str, spec.replicas))}")  # fmt: skip
    p.add_argument("--tp", nargs="+", help="tensor-parallel degrees of a replica (1, 2, 4, 8: its GPUs, on one node); "
                   "default: " + (",".join(map(str, spec.tp)) if spec.tp else "per GPU type, the smallest whose KV pool "
                   "holds the longest request (the sizing library)"))  # fmt: skip
    p.add_argument("--routers", nargs="+", help=f"routers of cells with several replicas: {', '.join(RouterKind)}; "
                   f"default: {','.join(spec.routers)}")  # fmt: skip
    p.add_argument("--serve-overhead", action="store_true", default=None,
                   help="also run each one-replica cell through Ray Serve, to measure what Serve adds to the direct path")
    p.add_argument("--seeds", nargs="+", help=f"default: {','.join(map(str, spec.seeds))}")
    p.add_argument("--trials", type=int, help="runs of every cell, each with a seed derived from the base seed, for intervals "
                   f"that show run-to-run spread; default: {spec.trials}")


def _workload_flags(p: argparse.ArgumentParser, spec: SweepSpec, hidden: Collection[str]) -> None:
    """The agent jobs each cell runs."""
    p.add_argument("--duration-s", type=float, help=f"arrival window; default: {spec.workload.duration_s:g}")
    p.add_argument("--scale", type=float, help=f"token-count scale; default: {spec.workload.scale:g}")
    p.add_argument("--workload", choices=[*WORKLOAD_SHAPES, "trace"],
                   help="the job shape: the source study's fixed 8 turns, the parametric agent workload (turns, "
                   "tool outputs, answers and tool times drawn per job from presets; the flags below override each), "
                   f"or a replayed trace (--trace); default: {spec.workload.source}")
    p.add_argument("--trace", type=Path, help="replay this agent trace (kvsweep-trace/1 JSONL, docs/workloads.md)")
    p.add_argument("--max-context", type=int, help="drop whole jobs with a request (prompt and answer) longer than "
                   "this many tokens, counted in the summary (num_jobs_dropped); default: none dropped")
    p.add_argument("--load", nargs="+", help=argparse.SUPPRESS if "load" in hidden else "with a trace: load "
                   "multipliers of its own arrival rate (the JPS axis becomes multiplier x the trace's rate)")
    shape = "a number, a preset name or a JSON distribution"
    p.add_argument("--turns", help=f"turns per job: {shape}")
    p.add_argument("--tool-tokens", help=f"tool-output tokens after each turn (before --scale): {shape}")
    p.add_argument("--output-tokens", help=f"completion tokens of each turn: {shape}")
    p.add_argument("--tool-time-s", help=f"client-side tool time between turns: {shape}; "
                   f"default: {_shown(spec.workload.tool_time_s)}")


def _engine_flags(p: argparse.ArgumentParser, spec: SweepSpec) -> None:
    """The model and the engine's settings."""
    p.add_argument("--model", help=f"default: {spec.model}")
    p.add_argument("--weights", choices=[weights.value for weights in Weights],
                   help="real: the model's own weights (its directory, or every GPU node's Hugging Face cache); dummy: "
                   "random weights of its exact shapes from its shipped config and the project's tokenizer, no "
                   "download (fixed-length answers keep the serving behaviour the real model's); "
                   f"default: {spec.weights.value}")
    p.add_argument("--kv-blocks", type=int, help="fix the KV pool size in blocks")
    p.add_argument("--max-num-seqs", type=int, help="the most requests vLLM runs in one step (its --max-num-seqs); "
                   "default: vLLM's for the device")
    p.add_argument("--max-model-len", type=int, help="the longest prompt and answer vLLM takes; default: "
                   f"{spec.engine_options.max_model_len}")
    p.add_argument("--gpu-memory-utilization", type=float, help="the share of each GPU's memory vLLM takes for the "
                   f"weights and KV pool; default: {spec.engine_options.gpu_memory_utilization:g}")


def _run_flags(p: argparse.ArgumentParser, spec: SweepSpec, hidden: Collection[str]) -> None:
    """How the sweep runs: limits, the cluster, tracking, the SLO, the budget, what to rerun."""
    p.add_argument("--max-attempts", type=int, help=f"attempts per cell when a replica crashes; default: {spec.limits.max_attempts}")
    p.add_argument("--cell-timeout-s", type=float, help="whole-cell time limit")
    p.add_argument("--hang-timeout-s", type=float, help=f"no engine progress this long: hung; default: {spec.limits.hang_timeout_s:g}")
    p.add_argument("--start-stall-s", type=float, help="a starting replica with no log output, CPU or I/O this long: "
                   f"hung; default: {spec.limits.start_stall_s:g}")  # fmt: skip
    p.add_argument("--client-actors", type=int, help=f"load-generator actors per cell; default: {spec.limits.client_actors}")
    p.add_argument("--ray-address", help="Ray cluster address; default: RAY_ADDRESS, a running local cluster, or a new one")
    p.add_argument("--scale-up-timeout-s", type=float, default=SweepOptions.scale_up_timeout_s,
                   help="wait this long for the autoscaler's first node of a GPU type, then report its cells pending; "
                        f"default: {SweepOptions.scale_up_timeout_s:g}")  # fmt: skip
    p.add_argument("--tracking-patience-s", type=float, default=SweepOptions.tracking_patience_s,
                   help="retry the tracking store this long when it stops answering (a server restarting), then stop "
                        "with every finished cell on disk; the re-run logs them; "
                        f"default: {SweepOptions.tracking_patience_s:g}")  # fmt: skip
    p.add_argument("--autoscaler-config", type=Path,
                   help="the cluster YAML the autoscaler runs with, where it publishes none (default: found on the head)")
    p.add_argument("--slo", help="judge every cell against this service-level objective: comma-separated "
                   "METRIC_STAT=TIME targets, METRIC jct, ttft or tbt, STAT mean or pNN, e.g. jct_p90=60s,ttft_p99=2s; "
                   "each done cell gets slo_met (met, missed or unsure, at 95%%) and its goodput (docs/capacity.md)")
    p.add_argument("--gpu-budget", help=argparse.SUPPRESS if "gpu_budget" in hidden else "device time to spend, for "
                   "all GPU types (2h) or per type (H100=2h,H200=30m; cpu is the CPU engine): every cell is predicted "
                   "in the simulator first, then the cells whose measurement can change the answer are measured "
                   "first, until the next one's estimate does not fit; a re-run goes on in the same order "
                   "(docs/budgeted-sweeps.md)")  # fmt: skip
    p.add_argument("--name", help=f"sweep name (results subdirectory, MLflow experiment); default: {spec.name}")
    p.add_argument("--progress-interval-s", type=float, default=SweepOptions.progress_interval_s,
                   help="plain progress lines every this many seconds")
    p.add_argument("--dry-run", action="store_true", help="print the cells, which are done, and where each would run")
    p.add_argument("--rerun", action="store_true", help="run cells again even if done")


def apply_flags(spec: SweepSpec, args: argparse.Namespace) -> SweepSpec:
    """``spec`` with every given flag applied, validated as a whole."""
    data = spec.model_dump()
    for flag, convert in LIST_FLAGS.items():
        if getattr(args, flag) is not None:
            data[flag] = parse_list(getattr(args, flag), convert, flag.replace("_", "-"))
    if args.dram_gb is not None:
        data["dram_gb_by_gpu"] = {}
    data["dram_gb_by_gpu"] = {gpu: budgets for gpu, budgets in data["dram_gb_by_gpu"].items() if gpu in data["gpus"]}
    _apply_trace_flags(spec, args, data)
    if args.workload in WORKLOAD_SHAPES:
        data["workload"] |= WORKLOAD_SHAPES[args.workload] | {"trace": None}
    for flag, field in SHAPE_FLAGS.items():
        if getattr(args, flag) is not None:
            try:
                value = parse_distribution(getattr(args, flag), "--" + flag.replace("_", "-"))
            except ValueError as error:
                raise InputError(str(error)) from None
            # One number of tool tokens is every tool output's size (the field's list form is per turn).
            if field == "tool_tokens" and isinstance(value, float):
                value = Fixed(value=value)
            data["workload"][field] = value
    for flag, (*sections, field) in VALUE_FLAGS.items():
        if getattr(args, flag) is not None:
            section = data
            for name in sections:
                section = section[name]
            section[field] = getattr(args, flag)
    return SweepSpec.model_validate(data)


def _apply_trace_flags(spec: SweepSpec, args: argparse.Namespace, data: dict) -> None:
    """``--trace`` and ``--load`` into ``data``: the trace replaces the job shape; the JPS axis becomes the load
    multipliers times the trace's own rate (a new trace keeps the multipliers a trace sweep already had)."""
    if args.workload == "trace" and args.trace is None and spec.workload.trace is None:
        raise InputError("--workload trace needs --trace PATH (a kvsweep-trace/1 file; docs/workloads.md)")
    old = spec.workload.trace
    if args.trace is not None:
        try:
            data["workload"] = data["workload"] | WORKLOAD_SHAPES["source-study"] | {"trace": TraceRef.of(args.trace)}
        except TraceFormatError as error:
            raise InputError(f"--trace {error}; valid: a kvsweep-trace/1 file (docs/workloads.md), or one that "
                             "`kvsweep convert` wrote from a Mooncake, SWE-agent or kv-cache-tester trace") from None
    trace = data["workload"].get("trace")
    if args.load is not None:
        if trace is None:
            raise InputError("--load multiplies a trace's own arrival rate; valid only with --trace PATH")
        multipliers = parse_list(args.load, float, "load")
    elif args.trace is not None and old is not None and args.jps is None:
        multipliers = [jps / load_trace(old).native_jps for jps in data["jps"]]
    else:
        return
    if any(not m > 0 for m in multipliers):
        raise InputError(f"--load takes positive multipliers, got {' '.join(args.load)!r}")
    native = load_trace(TraceRef.model_validate(trace)).native_jps
    data["jps"] = [round(m * native, 6) for m in multipliers]


def check_requests_fit(spec: SweepSpec) -> None:
    """Raises ``InputError`` when a cell's schedule has a request longer than vLLM's ``max_model_len`` (it
    would be refused mid-run): each load and seed's schedule is drawn here, as its cell will draw it."""
    from orchestrator.sweep.planning.cells import expand

    for workload in dict.fromkeys(cell.workload for cell in expand(spec)):
        if error := schedule_for(workload).context_error(spec.engine_options.max_model_len):
            raise InputError(f"the workload at {workload.jps:g} JPS, seed {workload.seed}: {error}")


def results_dir_from(args: argparse.Namespace) -> Path:
    chosen = args.results_dir or (Path(os.environ[RESULTS_ENV]) if os.environ.get(RESULTS_ENV) else None)
    if chosen is None:
        chosen = Path("results")
        if RAY_WORKING_DIR_MARK in Path.cwd().parts:
            # A Ray job's working directory is a temporary copy; results there would vanish with it.
            chosen = Path.home() / "kvsweep-results"
    return chosen.expanduser().absolute()


# Why a folder takes no new file, by the error a file written in it met.
_UNWRITABLE = {
    errno.EACCES: "is not writable by this user (permission denied)",
    errno.EPERM: "is not writable by this user (permission denied)",
    errno.EROFS: "is on a read-only file system",
    errno.ENOENT: "takes no new files (a virtual file system such as /proc)",
    errno.ENOSPC: "is on a full disk",
    errno.EDQUOT: "is over its disk quota",
}


def check_writable(results_dir: Path) -> None:
    """Raises ``InputError`` unless the results directory can be created and written: probed in it, or where it
    does not exist yet in the nearest folder above that does (nothing is made before the sweep starts). The line
    says which folder refused and why: not a directory, permission, a read-only or virtual file system, a full disk."""
    existing = next(folder for folder in (results_dir, *results_dir.parents) if folder.exists())
    valid = "valid: a directory you can write, or a new one in such a directory"
    if not existing.is_dir():
        raise InputError(f"--results-dir {results_dir}: {existing} is a file, not a directory; {valid}")
    probe = existing / f".kvsweep-write-check-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        why = _UNWRITABLE.get(error.errno, f"cannot be written ({error.strerror or error})")
        where = "cannot write in it: it" if existing == results_dir else f"cannot create it: {existing}"
        raise InputError(f"--results-dir {results_dir}: {where} {why}; {valid}") from None


def prepare(spec: SweepSpec, args: argparse.Namespace):
    """The sweep and its options from the parsed flags, every check done (raises ``InputError`` with the one line to
    print: a value the spec refuses named by its flag, ``FLAG_OF_FIELD``)."""
    from orchestrator.sweep.runtime.tracking import absolute_tracking_uri, check_tracking_server, default_tracking_uri

    try:
        spec = apply_flags(spec, args)
    except ValidationError as error:
        raise InputError(flag_line(error, FLAG_OF_FIELD, args)) from None
    slo = Slo.parse(args.slo) if args.slo else None
    gpu_budget = GpuBudget.parse(args.gpu_budget) if args.gpu_budget else None
    if gpu_budget is not None:
        check_budget(spec, gpu_budget)
    check_requests_fit(spec)
    for flag in ("scale_up_timeout_s", "tracking_patience_s"):
        if not getattr(args, flag) > 0:
            raise InputError(f"--{flag.replace('_', '-')} must be positive seconds, got {getattr(args, flag):g}")
    results_dir = results_dir_from(args)
    tracking_uri = absolute_tracking_uri(args.tracking_uri) if args.tracking_uri else default_tracking_uri(results_dir)
    check_tracking_server(tracking_uri)
    check_writable(results_dir)
    options = SweepOptions(
        results_dir, tracking_uri, args.dry_run, args.rerun, args.ray_address, args.progress_interval_s,
        scale_up_timeout_s=args.scale_up_timeout_s, autoscaler_config=args.autoscaler_config,
        tracking_patience_s=args.tracking_patience_s, slo=slo, gpu_budget=gpu_budget,
    )  # fmt: skip
    return spec, options


def check_budget(spec: SweepSpec, budget: GpuBudget) -> None:
    """Raises ``InputError`` for a budget the sweep cannot spend: on types it lacks, on a sweep that measures nothing,
    or on the fake engine's cpu device (the simulator models that device only from the real CPU engine)."""
    budget.check_types(spec.gpus)
    if spec.engine is EngineKind.SIM:
        raise InputError(f"--gpu-budget {budget} with --engine sim: nothing is measured; valid with --engine auto, "
                         "vllm or fake")  # fmt: skip
    if spec.engine is EngineKind.FAKE and CPU in spec.gpus and budget.measures(CPU):
        raise InputError(f"--gpu-budget {budget} on the fake engine's cpu device: the simulator predicts that device "
                         "only from the real CPU engine's profile; valid: the fake engine on GPU types (--gpus H100)")  # fmt: skip


def sweep_main(spec: SweepSpec, argv: list[str] | None = None, script: str | None = None) -> int:
    """Runs ``spec`` as ``kvsweep sweep SCRIPT`` (default: the script running, ``running_sweep``) with ``argv``'s
    flags; its exit code."""
    from orchestrator.sweep.runtime.budgeted import run_budgeted_sweep
    from orchestrator.sweep.runtime.driver import run_sweep

    script = script or running_sweep(spec)
    args = parser(spec, f"sweep {script}", sweep_doc(script)).parse_args(argv)

    def run() -> int:
        prepared, options = prepare(spec, args)
        return (run_budgeted_sweep if options.gpu_budget is not None else run_sweep)(prepared, options)

    return run_with_one_line_errors(run)


def run_with_one_line_errors(run) -> int:
    """``run()``'s exit code, or 2 with one ``error:`` line for bad input."""
    try:
        return run()
    except ValidationError as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
    return 2


def parse_list(values: list[str], convert, flag: str) -> list:
    items = [item for value in values for item in value.split(",") if item]
    try:
        return [convert(item) for item in items]
    except ValueError:
        raise InputError(f"--{flag} takes a list of {convert.__name__} values, got {' '.join(values)!r}") from None
