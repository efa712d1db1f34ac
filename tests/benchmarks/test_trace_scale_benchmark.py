"""The Mooncake-scale benchmark's machinery at a small size: the file it writes is Mooncake's format with sessions
to recover, and every request it converts is simulated to the end (timings are the benchmark's job)."""

import json

from benchmarks import trace_scale
from orchestrator.workload.traces.mooncake import read_mooncake


def test_a_small_run_recovers_sessions_and_simulates_every_request(tmp_path, capsys):
    assert trace_scale.main(["--requests", "60", "--keep", str(tmp_path)]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    jobs, _ = read_mooncake(tmp_path / "mooncake-shaped.jsonl")
    assert sum(len(job.turns) for job in jobs) == figures["requests"] == figures["completed"] == 60
    assert figures["sessions"] == len(jobs) < 60  # later turns joined their sessions
    assert max(len(job.turns) for job in jobs) >= 2 and figures["mean_prompt_tokens"] > 3000
