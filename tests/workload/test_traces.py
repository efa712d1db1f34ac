"""Agent traces: the project's format and its errors, the shipped trace and its generator, and a replay's
schedule, prompts and prefix structure (the simulator's replay here too; the real CPU engine's is in
``tests/integration/test_trace_replay.py``)."""

from __future__ import annotations

import shutil

import pytest
from tokenizers import Tokenizer

from orchestrator.records.schema import RequestRecord, RequestStatus
from orchestrator.roofline.hardware import Device
from orchestrator.sim.config import sim_engine
from orchestrator.sim.loop import simulate
from orchestrator.workload.plan import build_plan
from orchestrator.workload.schedule import schedule_for
from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.traces.generate import SHIPPED, generate, main
from orchestrator.workload.traces.schema import (
    TraceFormatError,
    TraceJob,
    TraceRef,
    TraceTurn,
    dump_trace,
    load_trace,
    parse_trace,
    read_trace_file,
)
from tests.workload import DATA

TRACE = TraceRef.of(SHIPPED)


def replay(**fields) -> WorkloadSpec:
    return WorkloadSpec.model_validate({"jps": load_trace(TRACE).native_jps, "duration_s": 1000, "scale": 0.5,
                                        "trace": TRACE, **fields})  # fmt: skip


def test_the_shipped_trace_is_what_its_documented_generator_writes(tmp_path):
    assert main(["--out", str(tmp_path / "agent-small-v1.jsonl")]) == 0
    assert (tmp_path / "agent-small-v1.jsonl").read_bytes() == SHIPPED.read_bytes()
    trace = read_trace_file(SHIPPED)
    assert len(trace.jobs) == 24 and {len(job.turns) for job in trace.jobs} <= set(range(3, 11))
    assert max(turn.tool_s for job in trace.jobs for turn in job.turns) <= 3.0
    assert {block.split("-")[0] for block in trace.shared_blocks} == {"sysA", "sysB"}
    assert any(job.turns[0].prefix_blocks[0].startswith(job.job_id) for job in trace.jobs)  # jobs of no group


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("malformed-field.jsonl", "malformed-field.jsonl:3: turns[0].output_tokens: got 'many'; valid: an integer >= 1"),
        ("malformed-chain.jsonl", "malformed-chain.jsonl:3: turns[0].prefix_blocks: block 'a1' at position 0 after "
                                  "None, but line 2 has it at position 1 after 's0'; ids are chained prefixes"),
        ("malformed-order.jsonl", "malformed-order.jsonl:3: arrival_s: 1 is before the previous job's 2; valid: jobs "
                                  "sorted by arrival"),
        ("malformed-json.jsonl", "malformed-json.jsonl:2: json: Expecting ',' delimiter at column 73"),
    ],
)  # fmt: skip
def test_a_malformed_trace_fails_with_one_line_naming_the_file_the_line_and_the_field(name, message):
    with pytest.raises(TraceFormatError) as raised:
        read_trace_file(DATA / name)
    assert str(raised.value) == f"{DATA / name}{message.removeprefix(name)}"


def test_a_trace_round_trips_and_a_changed_file_is_refused_by_its_hash(tmp_path):
    jobs = [TraceJob("a", 0.0, (TraceTurn(40, 4, 0.5, ("s0", "a1")), TraceTurn(60, 4, 0.0, ("s0", "a1", "a2"))))]
    data = dump_trace("t", 16, jobs)
    assert parse_trace(data, "t.jsonl").jobs == tuple(jobs)
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    ref = TraceRef.of(path)
    path.write_bytes(data.replace(b'"output_tokens":4', b'"output_tokens":5', 1))
    with pytest.raises(TraceFormatError, match="t.jsonl: sha256: the file changed since the sweep was set up"):
        load_trace(ref)


def test_a_replay_rescales_arrivals_to_the_cells_rate_and_keeps_every_turn_as_recorded():
    trace = load_trace(TRACE)
    for load in (1, 2):
        schedule = schedule_for(replay(jps=trace.native_jps * load))
        assert schedule.source == "trace" and schedule.block_tokens == 32 and len(schedule.jobs) == 24
        for job, recorded in zip(schedule.jobs, trace.jobs, strict=True):
            assert job.arrival_s == pytest.approx(recorded.arrival_s / load)
            assert [t.tool_time_s for t in job.turns] == [t.tool_s for t in recorded.turns[:-1]] + [0.0]
            assert [t.output_tokens for t in job.turns] == [t.output_tokens for t in recorded.turns]
            assert [t.prefix_blocks for t in job.turns] == [t.prefix_blocks for t in recorded.turns]
            # Scale 0.5: 64-token blocks become 32, the tail under a block is halved and rounded.
            assert [t.prompt_tokens for t in job.turns] == [
                32 * len(t.prefix_blocks) + round((t.input_tokens - 64 * len(t.prefix_blocks)) / 2) for t in recorded.turns]
    window = schedule_for(replay(duration_s=20))
    assert [job.job_id for job in window.jobs] == [job.job_id for job in trace.jobs if job.arrival_s < 20]


def test_replay_prompts_hit_their_token_counts_and_share_exactly_their_declared_blocks(tiny_model_dir, tiny_counter):
    spec = replay()
    schedule = schedule_for(spec)
    plan = build_plan(spec, tiny_counter, schedule)
    tokenizer = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    requests = [(shape, turn) for job, shape_job in zip(plan.jobs, schedule.jobs, strict=True)
                for turn, shape in zip(job.turns, shape_job.turns, strict=True)]  # fmt: skip
    ids = {}
    for shape, turn in requests:
        ids[shape] = tokenizer.encode(turn.prompt).ids  # BOS included, as the server counts
        assert len(ids[shape]) == shape.prompt_tokens == turn.target_prompt_tokens
    # Any two requests: equal tokens over the blocks both declare, and different from the first block they do not.
    shapes = [shape for shape, _ in requests]
    for a in shapes[::7]:
        for b in shapes[::5]:
            if a is b:
                continue
            common = next((i for i, (x, y) in enumerate(zip(a.prefix_blocks, b.prefix_blocks)) if x != y),
                          min(len(a.prefix_blocks), len(b.prefix_blocks)))  # fmt: skip
            assert ids[a][: 32 * common] == ids[b][: 32 * common]
            if common < min(len(a.prefix_blocks), len(b.prefix_blocks)):
                assert ids[a][32 * common: 32 * common + 32] != ids[b][32 * common: 32 * common + 32]


def _sent(job: str, turn: int, at: float) -> RequestRecord:
    return RequestRecord(job_id=job, job_index=0, turn=turn, is_last=False, status=RequestStatus.OK, scheduled_at=at,
                         sent_at=at, first_token_at=None, finished_at=at + 1, target_prompt_tokens=1, prompt_tokens=1,
                         cached_tokens=0, best_cached_tokens=0, completion_tokens=1, error=None)  # fmt: skip


def test_the_best_hit_of_a_replayed_request_is_what_earlier_requests_declared(tmp_path):
    jobs = [TraceJob("a", 0.0, (TraceTurn(40, 4, 0.5, ("s0", "a1")), TraceTurn(60, 4, 0.0, ("s0", "a1", "a2")))),
            TraceJob("b", 0.5, (TraceTurn(40, 4, 0.0, ("s0", "b1")),))]  # fmt: skip
    path = tmp_path / "t.jsonl"
    path.write_bytes(dump_trace("t", 16, jobs))
    schedule = schedule_for(WorkloadSpec(jps=2, duration_s=10, trace=TraceRef.of(path)))
    best = schedule.declared_best_tokens([_sent("a", 1, 0.0), _sent("b", 1, 0.6), _sent("a", 2, 2.0)])
    assert best == {("a", 1): 0, ("b", 1): 16, ("a", 2): 32}  # b shares a's s0; a's turn 2 its own s0, a1
    # Sent in another order, the other request finds the shared block.
    assert schedule.declared_best_tokens([_sent("b", 1, 0.0), _sent("a", 1, 0.6)])[("a", 1)] == 16


@pytest.mark.parametrize("policy", ["fcfs", "continuum"])
def test_the_simulator_replays_the_trace_and_hits_exactly_the_declared_shared_prefixes(policy):
    spec = replay()
    schedule = schedule_for(spec)
    engine = sim_engine(Device.gpu("H100"), "meta-llama/Llama-3.1-8B-Instruct", policy, 0, spec)
    requests = schedule.with_best_cached(simulate(spec, engine, schedule).requests)
    assert len(requests) == sum(len(job.turns) for job in schedule.jobs)
    planned = {(job.job_id, t.turn): t for job in schedule.jobs for t in job.turns}
    for record in requests:
        shape = planned[(record.job_id, record.turn)]
        expected = min(record.best_cached_tokens, shape.prompt_tokens - 1) // 16 * 16
        # A roomy H100 at the trace's own rate evicts nothing: every declared block sent before hits, and
        # nothing else does (a group's first request finds its shared blocks cold).
        assert record.cached_tokens == expected and record.prompt_tokens == shape.prompt_tokens
    assert sum(record.cached_tokens for record in requests) > 0.5 * sum(record.prompt_tokens for record in requests)


def test_a_shared_prefix_is_one_cache_for_every_job_and_a_small_pool_evicts_it_between_its_senders(tmp_path):
    """Job "a" sends a document of 8 blocks, 4 jobs of 30 blocks of their own follow, then job "c" sends the same
    document. Roomy, "c" finds it cached; in a pool of 48 blocks the others' blocks evict it first, and a CPU tier
    has kept it."""
    doc = tuple(f"doc{i}" for i in range(8))

    def job(name: str, at: float, blocks: tuple[str, ...]) -> TraceJob:
        return TraceJob(name, at, (TraceTurn(16 * len(blocks) + 8, 4, 0.0, blocks),))

    own = {name: tuple(f"{name}{i}" for i in range(30)) for name in ("f1", "f2", "f3", "f4")}
    others = [job(name, 1.0 + i, blocks) for i, (name, blocks) in enumerate(own.items())]
    jobs = [job("a", 0.0, doc + ("a0", "a1")), *others, job("c", 10.0, doc + ("c0", "c1"))]
    path = tmp_path / "doc.jsonl"
    path.write_bytes(dump_trace("doc", 16, jobs))
    trace = TraceRef.of(path)
    spec = WorkloadSpec(jps=load_trace(trace).native_jps, duration_s=100, trace=trace)
    schedule = schedule_for(spec)

    def run(num_kv_blocks: int | None, policy: str = "fcfs"):
        sized = {} if num_kv_blocks is None else {"num_kv_blocks": num_kv_blocks}
        engine = sim_engine(Device.gpu("H100"), "meta-llama/Llama-3.1-8B-Instruct", policy, 8, spec, **sized)
        result = simulate(spec, engine, schedule)
        return {record.job_id: record.cached_tokens for record in result.requests}, result.stats.evicted_blocks

    roomy, roomy_evicted = run(None)
    assert roomy == {"a": 0, "f1": 0, "f2": 0, "f3": 0, "f4": 0, "c": 8 * 16} and roomy_evicted == 0
    small, small_evicted = run(48)
    assert small["c"] == 0 and small_evicted > 0
    # A CPU tier keeps what the GPU evicted, whichever job saved it: "c" loads the document "a" computed.
    tiered, tiered_evicted = run(48, "lmcache")
    assert tiered["c"] == 8 * 16 and tiered_evicted > 0


def test_shipped_trace_copies_elsewhere_are_the_same_cell(tmp_path):
    from orchestrator.cell.spec import CellSpec, EngineKind
    from orchestrator.sweep.planning.spec import EngineOptions

    copy = tmp_path / "copy.jsonl"
    shutil.copy(SHIPPED, copy)
    cells = [CellSpec(engine=EngineKind.SIM, gpu="H100", policy="fcfs", dram_gb=0, model="m",
                      workload=replay(trace=TraceRef.of(path)), engine_options=EngineOptions())
             for path in (SHIPPED, copy)]  # fmt: skip
    assert cells[0].key == cells[1].key
    assert cells[0].params()["workload.source"] == "trace"
    other = generate(seed=8)
    (tmp_path / "other.jsonl").write_bytes(dump_trace("other", 64, other))
    changed = cells[0].model_copy(update={"workload": replay(trace=TraceRef.of(tmp_path / "other.jsonl"))})
    assert changed.key != cells[0].key
