"""Generates agent traces in the project's own format, and the small one the project ships for its tests
and docs (``orchestrator/data/traces/agent-small-v1.jsonl``)::

    python -m orchestrator.workload.traces.generate [--seed 7] [--jobs 24] [--jps 0.5] [--out PATH]

A job belongs to one of two shared-prefix groups (a system prompt and tool definitions its group's jobs
all send: 4 or 6 blocks) or to none. Each turn's prompt is the group's blocks, then the job's own blocks,
which grow by 2 to 6 per turn (the previous answer and tool result), then a tail shorter than a block that
no other request shares. Turns per job 3 to 10; answers 8 to 40 tokens; tool times from the SWE-agent
mixture cut at 3 s, so a replay on the CPU engine stays short. Everything is drawn from the seed, so the
same arguments give the same bytes.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from orchestrator.paths import PROJECT_ROOT
from orchestrator.records.store import atomic_write_bytes
from orchestrator.workload.distributions import PRESETS, Capped
from orchestrator.workload.traces.schema import TraceJob, TraceTurn, dump_trace

SHIPPED = PROJECT_ROOT / "orchestrator" / "data" / "traces" / "agent-small-v1.jsonl"
BLOCK_TOKENS = 64
GROUPS = {"sysA": 4, "sysB": 6}  # shared-prefix group -> its blocks
TOOL_TIME = Capped(dist=PRESETS["swe-agent-tool-time"], max=3.0)


def generate(seed: int = 7, num_jobs: int = 24, jps: float = 0.5) -> list[TraceJob]:
    rng = random.Random(f"agent-trace:{seed}")
    jobs, arrival = [], 0.0
    for index in range(num_jobs):
        job_id = f"j{index + 1:04d}"
        group = rng.choice([*GROUPS, None])
        shared = tuple(f"{group}-{i}" for i in range(GROUPS[group])) if group else ()
        own: list[str] = []
        turns = []
        num_turns = rng.randint(3, 10)
        for turn in range(num_turns):
            own += [f"{job_id}-{len(own) + i}" for i in range(rng.randint(2, 6))]
            blocks = shared + tuple(own)
            last = turn == num_turns - 1
            turns.append(TraceTurn(
                input_tokens=len(blocks) * BLOCK_TOKENS + rng.randint(1, BLOCK_TOKENS - 1),
                output_tokens=rng.randint(8, 40),
                tool_s=0.0 if last else round(TOOL_TIME.sample(rng), 3),
                prefix_blocks=blocks,
            ))  # fmt: skip
        jobs.append(TraceJob(job_id, round(arrival, 3), tuple(turns)))
        arrival += rng.expovariate(jps)
    return jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=24)
    parser.add_argument("--jps", type=float, default=0.5, help="mean arrival rate of the jobs")
    parser.add_argument("--out", type=Path, default=SHIPPED)
    args = parser.parse_args(argv)
    if args.jobs < 1 or not args.jps > 0:
        print(f"error: --jobs {args.jobs} and --jps {args.jps:g}: valid: at least 1 job at a positive rate",
              file=sys.stderr)
        return 2
    generator = {"command": "python -m orchestrator.workload.traces.generate", "seed": args.seed, "jobs": args.jobs,
                 "jps": args.jps}  # fmt: skip
    data = dump_trace(args.out.stem, BLOCK_TOKENS, generate(args.seed, args.jobs, args.jps), generator)
    atomic_write_bytes(data, args.out)
    print(f"wrote {args.out} ({args.jobs} jobs, {len(data):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
