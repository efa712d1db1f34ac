"""Converts a public agent trace into the project's format (each format's module says how it is read)::

    python -m orchestrator.workload.traces.convert --format mooncake TRACE.jsonl --out mine.jsonl [--block-tokens 512]
        [--sessions recover|per-request] [--min-shared 0.5]
    python -m orchestrator.workload.traces.convert --format swe-agent RUN/*.traj --out mine.jsonl
        [--tokenizer DIR] [--block-tokens 64] [--jps 0.5] [--seed 7]
    python -m orchestrator.workload.traces.convert --format kv-cache-tester traces/ --out mine.jsonl
        [--sample 50] [--jps 0.5] [--seed 7] [--shared-prefix-share 0.5]

The result is checked by reading it back as any trace is; then ``python sweeps/agent_trace.py --trace
mine.jsonl`` replays it. A malformed input fails with one line naming the file, the line and the field.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from orchestrator.inputs.parser import command_parser
from orchestrator.records.store import atomic_write_bytes
from orchestrator.workload.traces.kv_cache_tester import DEFAULT_SHARED_PREFIX_SHARE, read_kv_cache_tester
from orchestrator.workload.traces.mooncake import MOONCAKE_BLOCK_TOKENS, read_mooncake
from orchestrator.workload.traces.schema import TraceFormatError, dump_trace, parse_trace
from orchestrator.workload.traces.sessions import DEFAULT_MIN_SHARED
from orchestrator.workload.traces.swe_agent import read_swe_agent


# What each --format reads, for its help and for an input that is not of it.
FORMATS = {
    "mooncake": "Mooncake's JSON Lines, one request a line with timestamp, input_length, output_length and hash_ids",
    "swe-agent": "SWE-agent trajectory files (<instance>.traj, or mini-swe-agent's .traj.json)",
    "kv-cache-tester": "kv-cache-tester's conversations (traces/trace_NNNN.json: one JSON object a file, with "
                       "block_size and requests)",
}  # fmt: skip


def parser() -> argparse.ArgumentParser:
    p = command_parser("convert", __doc__)
    p.add_argument("--format", required=True, choices=FORMATS,
                   help="the input's format: " + "; ".join(f"{name}: {what}" for name, what in FORMATS.items()))
    p.add_argument("inputs", nargs="+", type=Path, help="the trace file (mooncake), trajectory files (swe-agent), or "
                   "conversation files and directories of them (kv-cache-tester: every *.json in a directory)")
    p.add_argument("--out", required=True, type=Path, help="the converted trace (kvsweep-trace/1 JSON Lines)")
    p.add_argument("--block-tokens", type=int,
                   help=f"tokens per block; default: {MOONCAKE_BLOCK_TOKENS} (mooncake), 64 (swe-agent)")
    p.add_argument("--sessions", choices=("recover", "per-request"), default="recover",
                   help="mooncake: requests without a session_id are grouped into sessions recovered from their block "
                        "chains (recover), or each is a job of one turn (per-request); default: recover")
    p.add_argument("--min-shared", type=float, default=DEFAULT_MIN_SHARED,
                   help="mooncake: the share of a request's blocks that must be a session's latest prompt for it to "
                        f"be that session's next turn; default: {DEFAULT_MIN_SHARED:g}")
    p.add_argument("--tokenizer", help="swe-agent: a Hugging Face tokenizer directory to count tokens with")
    p.add_argument("--jps", type=float, default=0.5,
                   help="swe-agent, kv-cache-tester: the jobs' arrival rate (the files have none)")
    p.add_argument("--seed", type=int, default=7, help="swe-agent, kv-cache-tester: seeds the arrivals and --sample")
    p.add_argument("--sample", type=int, help="kv-cache-tester: this many conversations drawn from the inputs (seeded)")
    p.add_argument("--shared-prefix-share", type=float, default=DEFAULT_SHARED_PREFIX_SHARE,
                   help="kv-cache-tester: the share of each conversation's tool_tokens + system_tokens declared shared "
                        f"by every conversation; default: {DEFAULT_SHARED_PREFIX_SHARE:g}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        _check_flags(args)
    except TraceFormatError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        jobs, notes = _read(args)
        data = dump_trace(args.out.stem, notes["block_tokens"], jobs, {"converted_from": notes})
        parse_trace(data, str(args.out))  # the same checks as any trace gets when a sweep reads it
    except TraceFormatError as error:
        print(f"error: {error}; {not_of_format(args.format)}", file=sys.stderr)
        return 2
    atomic_write_bytes(data, args.out)
    print(f"wrote {args.out}: {len(jobs)} jobs, {sum(len(job.turns) for job in jobs)} requests")
    if "sessions" in notes:
        print(f"sessions: {notes['sessions']}")
    return 0


def not_of_format(format_name: str) -> str:
    """What ``--format`` reads, for an input that did not read as it: the format's shape and the other formats."""
    others = ", ".join(name for name in FORMATS if name != format_name)
    return f"valid for --format {format_name}: {FORMATS[format_name]}; the other formats: {others} (docs/workloads.md)"


def _check_flags(args: argparse.Namespace) -> None:
    """Raises ``TraceFormatError`` naming a flag the format cannot take, before any input is read."""
    if args.block_tokens is not None and args.block_tokens < 1:
        raise TraceFormatError("--block-tokens", 0, "value", f"got {args.block_tokens}; valid: an integer >= 1")
    if args.format == "mooncake":
        if len(args.inputs) != 1:
            raise TraceFormatError("mooncake", 0, "inputs", f"got {len(args.inputs)} files; valid: one trace file")
        if not 0 < args.min_shared <= 1:
            raise TraceFormatError("--min-shared", 0, "value", f"got {args.min_shared:g}; valid: a share in (0, 1]")
        return
    if not args.jps > 0:
        raise TraceFormatError("--jps", 0, "value", f"got {args.jps:g}; valid: a positive rate")
    if args.format != "kv-cache-tester":
        return
    if args.block_tokens is not None:
        raise TraceFormatError("--block-tokens", 0, "value", "kv-cache-tester files state their own block_size")
    if not 0 <= args.shared_prefix_share <= 1:
        raise TraceFormatError("--shared-prefix-share", 0, "value",
                               f"got {args.shared_prefix_share:g}; valid: a share in [0, 1]")  # fmt: skip
    num_files = len(_conversation_files(args))
    if args.sample is not None and not 1 <= args.sample <= num_files:
        raise TraceFormatError("--sample", 0, "value", f"got {args.sample}; valid: 1 to {num_files} (the files given)")


def _conversation_files(args: argparse.Namespace) -> list[Path]:
    """kv-cache-tester's inputs: the files given, and every ``*.json`` of a directory given."""
    return sorted(file for path in args.inputs for file in (sorted(path.glob("*.json")) if path.is_dir() else [path]))


def _read(args: argparse.Namespace):
    if args.format == "mooncake":
        return read_mooncake(args.inputs[0], args.block_tokens or MOONCAKE_BLOCK_TOKENS,
                             recover=args.sessions == "recover", min_shared=args.min_shared)  # fmt: skip
    if args.format == "kv-cache-tester":
        files = _conversation_files(args)
        if args.sample is not None:
            files = sorted(random.Random(args.seed).sample(files, args.sample))
        return read_kv_cache_tester(files, args.jps, args.seed, args.shared_prefix_share)
    count = None
    if args.tokenizer:
        from orchestrator.workload.tokenizer import token_counter_for

        count = token_counter_for(args.tokenizer).count
    return read_swe_agent(args.inputs, args.block_tokens or 64, count, args.jps, args.seed)


if __name__ == "__main__":
    sys.exit(main())
