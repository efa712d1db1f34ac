"""The Mooncake-scale benchmark's machinery at a small size: the file it writes is Mooncake's format with sessions
to recover, every request it converts is simulated to the end on one replica and on eight, and the trace's bytes
are counted both ways (timings are the benchmark's job; ``--sweep`` runs the sweep command other tests cover)."""

import json

from benchmarks import trace_scale
from orchestrator.workload.traces.mooncake import read_mooncake


def test_a_small_run_recovers_sessions_and_simulates_every_request(tmp_path, capsys):
    assert trace_scale.main(["--requests", "60", "--keep", str(tmp_path)]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    jobs, _ = read_mooncake(tmp_path / "mooncake-shaped.jsonl")
    assert sum(len(job.turns) for job in jobs) == figures["requests"] == figures["completed_1"] == 60
    assert figures["completed_8"] == 60 and figures["steps_8"] >= figures["steps_1"]
    assert 0 < figures["trace_parquet_bytes"] < figures["trace_jsonl_bytes"]
    assert figures["sessions"] == len(jobs) < 60  # later turns joined their sessions
    assert max(len(job.turns) for job in jobs) >= 2 and figures["mean_prompt_tokens"] > 3000
    assert all(line["timestamp"] % 3000 == 0 for line in map(json.loads, (tmp_path / "mooncake-shaped.jsonl").open()))
