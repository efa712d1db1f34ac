"""Command line: KV sizing of a model on a GPU type, and the utilization window of a workload.

    python -m orchestrator.sizing --model llama-3.1-8b-instruct --gpu H100 --utilization 0.85
    python -m orchestrator.sizing --model llama-3.1-70b --gpu H100 --tp 4 --utilization 0.85 --cpu-gib 400
    python -m orchestrator.sizing --model qwen3.6-35b-a3b --gpu H100 --tp 2 --utilization 0.9 --overhead-gib 4 \\
        --concurrency 8 --isl 32000 --osl 2000 --sessions 200 --session-tokens 34800 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from orchestrator.gpus import GPU_TYPES
from orchestrator.inputs.parser import command_parser
from orchestrator.models.arch import load_model
from orchestrator.models.catalog import shipped_names
from orchestrator.sizing.kv import KIB, KV_DTYPE_BYTES, Sizing, size
from orchestrator.sizing.parallel import tp_problem
from orchestrator.units import GIB


def parser() -> argparse.ArgumentParser:
    p = command_parser("sizing", __doc__)
    p.add_argument("--model", required=True, help=f"a shipped config ({', '.join(shipped_names())}), a model dir or config.json")
    p.add_argument("--gpu", required=True, help=f"GPU type: {', '.join(GPU_TYPES)}")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree of one replica")
    p.add_argument("--utilization", type=float, default=0.9, help="vLLM --gpu-memory-utilization")
    p.add_argument("--overhead-gib", type=float, default=2.0, help="per-GPU activations, CUDA graphs, encoders")
    p.add_argument("--kv-dtype", choices=sorted(KV_DTYPE_BYTES), default="bf16", help="the KV cache's element type")
    p.add_argument("--block-size", type=int, default=16, help="tokens per KV block")
    p.add_argument("--concurrency", type=int, help="requests running at once (with --isl and --osl: the live set)")
    p.add_argument("--isl", type=int, help="input tokens per request")
    p.add_argument("--osl", type=int, help="output tokens per request")
    p.add_argument("--sessions", type=int, help="sessions kept warm (with --session-tokens: the reuse corpus)")
    p.add_argument("--session-tokens", type=int, help="retained tokens per session")
    p.add_argument("--cpu-gib", type=float, help="CPU KV tier per replica")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    problem = _check(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        arch = load_model(args.model)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if (problem := tp_problem(arch, args.tp)) is not None:
        print(f"error: --tp {args.tp} for {arch.name}: {problem}", file=sys.stderr)
        return 2
    live = args.concurrency * (args.isl + args.osl) if args.concurrency is not None else None
    corpus = args.sessions * args.session_tokens if args.sessions is not None else None
    result = size(arch, args.gpu, GPU_TYPES[args.gpu].memory_gib, tp=args.tp, utilization=args.utilization,
                  overhead_gib=args.overhead_gib, kv_dtype_bytes=KV_DTYPE_BYTES[args.kv_dtype],
                  block_size=args.block_size, live_tokens=live, corpus_tokens=corpus, cpu_gib=args.cpu_gib)  # fmt: skip
    if args.json:
        fields = {key: getattr(value, "value", value) for key, value in asdict(result).items()}
        print(json.dumps({**fields, "per_rank": _per_rank(result)}))
        return 0
    print(f"{arch.name} on {args.tp} x {args.gpu} at U={args.utilization:g}: {result.kv_bytes_per_token / KIB:g} KiB of KV "
          f"per token ({arch.num_kv_layers} of {arch.num_layers} layers cache), weights {result.weight_bytes / 1e9:.1f} GB, "
          f"KV {result.gpu_kv_bytes / GIB:.1f} GiB = {result.gpu_kv_tokens:,} tokens")  # fmt: skip
    if result.cpu_kv_tokens is not None:
        print(f"CPU tier: {result.cpu_kv_tokens:,} tokens")
    if result.tp > 1:
        print(result.rank_phrase())
    if result.u_live is not None:
        print(f"live set {live:,} tokens needs U >= {result.u_live:.3f}")
    if result.u_corpus is not None:
        print(f"reuse corpus {corpus:,} tokens fits at U >= {result.u_corpus:.3f}; disk tier active: {result.disk_tier_active}")
    if result.regime is not None:
        window = f"[{result.window[0]:.3f}, {result.window[1]:.3f}]" if result.window else "none (the live set never fits)"
        print(f"offload window {window}; at U={args.utilization:g}: {result.regime.meaning}")
    return 0


def _per_rank(result: Sizing) -> dict[str, float | int | None]:
    return {"weight_bytes": result.rank_weight_bytes, "kv_bytes": result.rank_kv_bytes,
            "kv_bytes_per_token": result.rank_kv_bytes_per_token, "kv_tokens": result.rank_kv_tokens,
            "cpu_kv_bytes": result.rank_cpu_kv_bytes}  # fmt: skip


def _check(args) -> str | None:
    if args.gpu not in GPU_TYPES:
        return f"unknown GPU type {args.gpu!r}; known: {', '.join(GPU_TYPES)}"
    if not 0 < args.utilization <= 1:
        return f"--utilization must be in (0, 1], got {args.utilization:g}"
    if args.tp < 1:
        return f"--tp must be 1 or more, got {args.tp}"
    if (args.concurrency is None) != (args.isl is None) or (args.isl is None) != (args.osl is None):
        return "--concurrency, --isl and --osl go together (the live set)"
    if (args.sessions is None) != (args.session_tokens is None):
        return "--sessions and --session-tokens go together (the reuse corpus)"
    return None


if __name__ == "__main__":
    sys.exit(main())
