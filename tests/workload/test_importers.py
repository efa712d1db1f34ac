"""The importers read hand-made samples written from each format's published description, say what they
inferred, and fail on a malformed file with one line naming the file, the line and the field."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from orchestrator.workload.schedule import schedule_for
from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.traces.convert import main as convert_main
from orchestrator.workload.traces.kv_cache_tester import read_kv_cache_tester
from orchestrator.workload.traces.mooncake import read_mooncake
from orchestrator.workload.traces.schema import TraceFormatError, TraceRef, read_trace_file
from orchestrator.workload.traces.swe_agent import read_swe_agent
from tests.workload import DATA


def test_mooncake_requests_become_jobs_and_sessions_become_multi_turn_jobs():
    jobs, notes = read_mooncake(DATA / "mooncake-sample.jsonl")
    assert [(job.job_id, job.arrival_s, len(job.turns)) for job in jobs] == [
        ("r1", 0.0, 1), ("r2", 0.0, 1), ("s-agent-1", 1.5, 3), ("r5", 2.6, 1)]  # fmt: skip
    session = jobs[2].turns
    assert [turn.input_tokens for turn in session] == [600, 1300, 1700]
    # The gap to turn 2 from the timestamps (2.3 s - 1.5 s), to turn 3 from its delay (400 ms).
    assert [turn.tool_s for turn in session] == [pytest.approx(0.8), pytest.approx(0.4), 0.0]
    # 512-token blocks: the ids of a prompt's partial last block are dropped.
    assert [turn.prefix_blocks for turn in session] == [("5",), ("5", "6"), ("5", "6", "7")]
    assert jobs[0].turns[0].prefix_blocks == ("0", "1") and jobs[1].turns[0].prefix_blocks == ("0", "3")
    assert "includes the original answer's service time" in notes["tool_s"]


def test_mooncake_sessions_are_recovered_from_block_chains_and_the_plain_reading_stays_an_option():
    """Only a session's latest prompt can be continued, and only by a request it covers at least half of."""
    jobs, notes = read_mooncake(DATA / "mooncake-sessions.jsonl")
    assert [(job.job_id, job.arrival_s, [turn.input_tokens for turn in job.turns]) for job in jobs] == [
        ("r1", 0.0, [1100, 1600, 2100]),  # lines 3 and 6 start with the previous turn's blocks
        ("r2", 0.5, [700, 1200]),  # line 4: one block of two is line 2's prompt, half
        ("r5", 4.5, [600]),  # its one block is the start of r1's chain, which has moved on
        ("r7", 6.5, [1600]),  # extends r1's first turn, not its latest: a branch, a job of its own
    ]  # fmt: skip
    assert [turn.tool_s for turn in jobs[0].turns] == [3.0, 3.0, 0.0] and jobs[1].turns[0].tool_s == 3.5
    assert jobs[0].turns[2].prefix_blocks == ("10", "11", "13", "15")
    assert "2 sessions of 2 turns or more (median 2.5, max 3) hold 5 of the 7 requests" in notes["sessions"]
    plain, notes = read_mooncake(DATA / "mooncake-sessions.jsonl", recover=False)
    assert [job.job_id for job in plain] == [f"r{line}" for line in range(1, 8)]
    assert {len(job.turns) for job in plain} == {1} and notes["sessions"].startswith("each request")
    stricter, _ = read_mooncake(DATA / "mooncake-sessions.jsonl", min_shared=0.6)
    assert [len(job.turns) for job in stricter] == [3, 1, 1, 1, 1]  # line 4 shares 50% of its blocks: too few now


def test_swe_agent_steps_become_turns_with_their_execution_times_and_a_shared_system_prompt(tmp_path):
    copies = [tmp_path / f"instance-{i}.traj" for i in range(2)]
    for copy in copies:
        shutil.copy(DATA / "swe-agent-sample.traj", copy)
    jobs, notes = read_swe_agent(copies, block_tokens=16, jps=1.0, seed=3)
    assert [job.job_id for job in jobs] == ["instance-0", "instance-1"] and jobs[1].arrival_s > 0
    turns = jobs[0].turns
    assert [turn.tool_s for turn in turns] == [0.18, 0.02, 6.4, 0.0]
    assert [b.input_tokens - a.input_tokens for a, b in zip(turns, turns[1:])] == [
        a.output_tokens + round(len(step) / 4) for a, step in zip(turns, (
            "AUTHORS.rst\nCHANGELOG.rst\nsetup.py\nsrc/\ntests/\n",
            "[File: /repo/src/fields.py (1997 lines total)]\n1474:        return value.total_seconds() / self.precision\n",
            "........ [100%]\n8 passed in 4.71s\n"))]  # fmt: skip
    # Both jobs send the same system message first: its full blocks are shared, the rest is each job's own.
    system = [block for block in turns[0].prefix_blocks if block.startswith("sys-")]
    assert len(system) == 10 and jobs[1].turns[0].prefix_blocks[:10] == tuple(system)
    assert jobs[1].turns[0].prefix_blocks[10:] != turns[0].prefix_blocks[10:]
    assert notes["tokens"] == "4 characters per token"


def test_kv_cache_tester_conversations_and_their_sub_agents_become_jobs_with_re_chained_blocks():
    folder = DATA / "kv-cache-tester"
    jobs, notes = read_kv_cache_tester([folder / "trace_a.json", folder / "trace_b.json"], jps=1.0, seed=3)
    assert [(job.job_id, len(job.turns)) for job in jobs] == [("trace_a", 3), ("trace_b", 2), ("trace_a/agent_001", 2)]
    parent, other, agent = jobs
    assert parent.arrival_s == 0.0 and agent.arrival_s == 5.5 and 0 < other.arrival_s < 5.5  # the sub-agent's offset
    assert [(t.input_tokens, t.output_tokens) for t in parent.turns] == [(700, 50), (900, 1), (1000, 80)]
    # think_time before the next request; else the gap in t less api_time; else the plain gap (counted).
    assert [t.tool_s for t in parent.turns] == [8.0, 2.5, 0.0] and agent.turns[0].tool_s == 1.0
    assert other.turns[0].tool_s == 4.0 and "(holds the original service time: 1 gaps)" in notes["tool_s"]
    first, second, third = (turn.prefix_blocks for turn in parent.turns)
    assert len(first) == 700 // 64 and second[:10] == first  # ids past the prompt's full blocks are dropped
    assert third[:10] == first and not set(third[10:]) & set(second)  # block 11 changed: the chain parts there
    # Half of tool_tokens + system_tokens, in whole blocks (2 and 1), is shared by every conversation and sub-agent.
    assert first[:2] == agent.turns[0].prefix_blocks[:2] == ("tools+system:0", "tools+system:1")
    assert other.turns[0].prefix_blocks[0] == "tools+system:0" and other.turns[0].prefix_blocks[1] not in first
    assert not set(agent.turns[1].prefix_blocks[2:]) & set(third)  # a sub-agent's ids are its own (local scope)
    assert notes["out"] == "1 answers of 0 tokens sent as 1 token"


def test_convert_samples_kv_cache_tester_conversations_from_a_directory(tmp_path, capsys):
    out = tmp_path / "claude.jsonl"
    folder = tmp_path / "traces"
    shutil.copytree(DATA / "kv-cache-tester", folder)
    (folder / "trace_malformed.json").unlink()
    flags = ["--format", "kv-cache-tester", str(folder), "--out", str(out)]
    assert convert_main([*flags, "--sample", "1", "--seed", "4"]) == 0
    assert read_trace_file(out).jobs[0].job_id in {"trace_a", "trace_b"}
    capsys.readouterr()
    assert convert_main([*flags, "--sample", "3"]) == 2
    assert capsys.readouterr().err == "error: --sample: value: got 3; valid: 1 to 2 (the files given)\n"


@pytest.mark.parametrize(
    ("reader", "name", "message"),
    [
        (read_mooncake, "mooncake-malformed.jsonl", ":2: hash_ids: block '1' at position 0 after None, but line 1 "
                                                    "has it at position 1 after '0'; ids are chained prefixes"),
        (lambda path: read_swe_agent([path]), "swe-agent-malformed.traj",
         ":12: trajectory[1].execution_time: missing; valid: seconds >= 0"),
        (lambda path: read_kv_cache_tester([path]), "kv-cache-tester/trace_malformed.json",
         ":4: requests[1].out: missing; valid: an integer >= 0"),
    ],
)  # fmt: skip
def test_a_malformed_file_fails_with_one_line_naming_the_file_the_line_and_the_field(reader, name, message):
    with pytest.raises(TraceFormatError) as raised:
        reader(DATA / name)
    assert str(raised.value) == f"{DATA / name}{message}"


def test_convert_writes_a_trace_that_replays_and_refuses_a_malformed_one(tmp_path):
    out = tmp_path / "mine.jsonl"
    command = [sys.executable, "-m", "orchestrator.workload.traces.convert", "--format", "mooncake"]
    done = subprocess.run([*command, str(DATA / "mooncake-sample.jsonl"), "--out", str(out), "--block-tokens", "256"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0 and "4 jobs, 6 requests" in done.stdout, done.stderr
    trace = read_trace_file(out)
    assert trace.block_tokens == 256 and trace.shared_blocks == {"0"}  # r1, r2 and r5 share block 0
    schedule = schedule_for(WorkloadSpec(jps=trace.native_jps, duration_s=100, trace=TraceRef.of(out)))
    assert sum(len(job.turns) for job in schedule.jobs) == 6
    failed = subprocess.run([*command, str(DATA / "mooncake-malformed.jsonl"), "--out", str(tmp_path / "bad.jsonl")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1 and "mooncake-malformed.jsonl:2: hash_ids" in failed.stderr
    assert not (tmp_path / "bad.jsonl").exists()
