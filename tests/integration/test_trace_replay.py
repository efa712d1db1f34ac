"""The real CPU engine's tiny fcfs replica, started once for this module. The shipped agent trace replayed on it
(issue 16's acceptance): every prompt's token count and every scheduled time exactly as planned, and the prefix
cache hitting the trace's declared shared blocks and nothing else. Then a trace whose shared document other jobs'
blocks push out of the pool: the engine evicts it, and the simulator's shared cache does the same. Last, the
same replica is the reference of a tensor-parallel one: the tiny model sharded over two processes, each bound to
one of this machine's cores, records a cell as this replica does and answers greedy prompts token for token as it
does."""

from __future__ import annotations

import pytest
import requests

from orchestrator.cell.spec import CellSpec, EngineKind
from orchestrator.gpus import CPU
from orchestrator.records.scheduler_trace_file import trace_events
from orchestrator.records.schema import RequestStatus
from orchestrator.replica.stack import read_node_stack
from orchestrator.roofline.hardware import Device
from orchestrator.sim.config import sim_engine
from orchestrator.sim.loop import simulate
from orchestrator.sweep.planning.spec import EngineOptions, RunLimits
from orchestrator.sweep.runtime.worker import CellWorker
from orchestrator.workload.schedule import schedule_for
from orchestrator.workload.spec import WorkloadSpec
from orchestrator.workload.traces.generate import SHIPPED
from orchestrator.workload.traces.schema import TraceJob, TraceRef, TraceTurn, dump_trace, load_trace
from tests.processes import replica_processes

pytestmark = pytest.mark.engine

BLOCK = 32  # the CPU engine's block: the trace's 64-token blocks at scale 0.5


NUM_BLOCKS = 1200
LIMITS = RunLimits(health_timeout_s=300, hang_timeout_s=120, client_actors=0)


@pytest.fixture(scope="module")
def worker():
    """One worker for the module's cells: they share the engine configuration, so they share its replica."""
    worker = CellWorker()
    yield worker
    worker.shutdown()


def replay_cell(trace: TraceRef, jps: float) -> CellSpec:
    workload = WorkloadSpec(jps=jps, duration_s=1000, scale=0.5, trace=trace, request_timeout_s=300, job_timeout_s=600)
    return CellSpec(engine=EngineKind.VLLM, gpu=CPU, policy="fcfs", dram_gb=0, model="tiny", workload=workload,
                    engine_options=EngineOptions(num_kv_blocks=NUM_BLOCKS))  # fmt: skip


@pytest.fixture(scope="module")
def replayed(worker):
    trace = TraceRef.of(SHIPPED)
    cell = replay_cell(trace, 2 * load_trace(trace).native_jps)
    outcome = worker.run(cell, LIMITS)
    assert outcome.status.is_done, outcome.reason
    return schedule_for(cell.workload), outcome


def test_every_request_is_sent_as_planned_with_its_exact_prompt(replayed):
    schedule, outcome = replayed
    planned = {(job.job_id, turn.turn): (job, turn) for job in schedule.jobs for turn in job.turns}
    records = {(record.job_id, record.turn): record for record in outcome.requests}
    assert records.keys() == planned.keys() and all(r.status is RequestStatus.OK for r in records.values())
    assert outcome.config.schedule_fingerprint == schedule.fingerprint()
    for (job_id, number), (job, turn) in planned.items():
        record = records[(job_id, number)]
        assert record.prompt_tokens == turn.prompt_tokens  # within 1% asked; exact with the tiny tokenizer
        assert record.completion_tokens == turn.output_tokens
        if number == 1:
            assert record.scheduled_at == pytest.approx(job.arrival_s, abs=1e-9)  # the trace's arrival, halved
        else:
            previous = records[(job_id, number - 1)]
            assert record.scheduled_at == pytest.approx(previous.finished_at + job.turns[number - 2].tool_time_s,
                                                        abs=1e-9)  # fmt: skip


def test_the_cell_records_the_node_stack_a_child_of_its_launcher_read_as_a_fresh_interpreter_reads_it(worker, replayed):
    _, outcome = replayed
    assert (worker.keeper.work_dir / "node-stack.out").exists()  # the worker's replicas fork from its launcher: so did this
    assert outcome.config.stack == read_node_stack() and outcome.config.stack.vllm and outcome.config.stack.torch


def test_the_prefix_cache_hits_the_declared_shared_blocks_and_nothing_else(replayed):
    schedule, outcome = replayed
    blocks = {(job.job_id, turn.turn): turn.prefix_blocks for job in schedule.jobs for turn in job.turns}
    requests = sorted(outcome.requests, key=lambda record: record.sent_at)

    def engine_hit(declared_blocks: int, prompt_tokens: int) -> int:
        # The trace's blocks are whole engine blocks here; vLLM never hits a prompt's last token.
        return min(declared_blocks * BLOCK, (prompt_tokens - 1) // BLOCK * BLOCK)

    def shared_run(chain: tuple[str, ...], available: set[str]) -> int:
        return next((i for i, block in enumerate(chain) if block not in available), len(chain))

    hits = 0
    for record in requests:
        chain = blocks[(record.job_id, record.turn)]
        # At most what requests sent before it declared (the record's best), and at least what requests that
        # had finished before it was sent declared (their blocks are computed and, in a roomy pool, kept).
        finished = {block for other in requests if other.finished_at <= record.sent_at
                    for block in blocks[(other.job_id, other.turn)]}  # fmt: skip
        most = engine_hit(record.best_cached_tokens // BLOCK, record.prompt_tokens)
        least = engine_hit(shared_run(chain, finished), record.prompt_tokens)
        assert least <= record.cached_tokens <= most, (record.job_id, record.turn, least, record.cached_tokens, most)
        hits += record.cached_tokens
    # Jobs of no group share nothing on their first turn; the rest of the traffic is mostly hits.
    for record in requests:
        if record.turn == 1 and blocks[(record.job_id, 1)][0].startswith(record.job_id):
            assert record.cached_tokens == 0
    assert hits > 0.5 * sum(record.prompt_tokens for record in requests)


def test_a_shared_document_pushed_out_of_the_pool_is_evicted_by_the_engine_and_by_the_simulator(worker, tmp_path):
    """Job "a" sends a document of 8 blocks, "b" the same right after, 5 jobs of 300 blocks of their own follow
    (more than the pool), then "c" sends the document again: "b" hits it, "c" finds it evicted."""
    doc = tuple(f"doc{i}" for i in range(8))

    def job(name: str, at: float, blocks: tuple[str, ...]) -> TraceJob:
        return TraceJob(name, at, (TraceTurn(64 * len(blocks) + 8, 4, 0.0, blocks),))

    fillers = [job(f"f{i}", 4.0 + i, tuple(f"f{i}-{k}" for k in range(300))) for i in range(5)]
    jobs = [job("a", 0.0, doc + ("a0", "a1")), job("b", 2.0, doc + ("b0", "b1")), *fillers,
            job("c", 15.0, doc + ("c0", "c1"))]  # fmt: skip
    path = tmp_path / "doc.jsonl"
    path.write_bytes(dump_trace("doc", 64, jobs))
    trace = TraceRef.of(path)
    cell = replay_cell(trace, load_trace(trace).native_jps)
    outcome = worker.run(cell, LIMITS)
    assert outcome.status.is_done, outcome.reason
    expected = {"a": 0, "b": 8 * BLOCK, "c": 0} | {filler.job_id: 0 for filler in fillers}
    assert {record.job_id: record.cached_tokens for record in outcome.requests} == expected
    evicted = sum(event.num_blocks for event in trace_events(outcome.scheduler_trace, ("evict",)))
    assert evicted >= 8 and outcome.config.num_evicted_blocks == evicted  # at least the document

    engine = sim_engine(Device.gpu("H100"), "meta-llama/Llama-3.1-8B-Instruct", "fcfs", 0, cell.workload,
                        block_size=BLOCK, num_kv_blocks=NUM_BLOCKS)  # the pool's shape; the model sets only the times
    simulated = simulate(cell.workload, engine, schedule_for(cell.workload))
    assert {record.job_id: record.cached_tokens for record in simulated.requests} == expected
    assert simulated.stats.evicted_blocks >= 8


# Each turn's prompt carries the answers before it, so a differing answer shows in every later prompt's length. Three
# short turns a job: a TP-2 replica steps about ten times slower than one process on two cores (its ranks meet in an
# all-reduce on every layer), and what is compared needs no more.
TP_WORKLOAD = WorkloadSpec(jps=1, duration_s=2, scale=0.1, tool_time_s=0.1, seed=7, num_turns=3, tool_tokens=(1640, 1510),
                           output_tokens=6)  # fmt: skip
GREEDY_TOKENS = 16
PROMPTS = ("The quick brown fox jumps over the lazy dog and then", "harbor glacier orbit " * 60, "1 2 3 4 5 6 7 8 9")


def generated_cell(tp: int) -> CellSpec:
    return CellSpec(engine=EngineKind.VLLM, gpu=CPU, policy="fcfs", dram_gb=0, model="tiny", workload=TP_WORKLOAD,
                    engine_options=EngineOptions(num_kv_blocks=NUM_BLOCKS), tp=tp)  # fmt: skip


@pytest.fixture(scope="module")
def one_and_two_processes(worker):
    """The same cell on this module's replica, then on a TP-2 one started by the same worker (its launcher kept),
    each replica's greedy answers and the titles of its server's processes taken while it is up."""
    ran = []
    for tp in (1, 2):
        outcome = worker.run(generated_cell(tp), LIMITS)
        assert outcome.status.is_done, outcome.reason
        titles = sorted(cmdline.split()[0] for _, cmdline in replica_processes() if cmdline.startswith("VLLM::"))
        ran.append((outcome, [_greedy_tokens(outcome.config.server_argv, prompt) for prompt in PROMPTS], titles))
    return ran


def test_one_rank_runs_inside_the_engine_core_and_each_of_two_in_a_worker_process(one_and_two_processes):
    """The CPU engine's TP-1 replica has no worker process (vLLM's multiprocess executor would spin one core on it
    while the engine core spins another); a TP-2 replica has one per rank."""
    (_, _, one), (_, _, two) = one_and_two_processes
    assert one == ["VLLM::EngineCore"]
    assert two == ["VLLM::EngineCore", "VLLM::Worker_TP0", "VLLM::Worker_TP1"]


def test_a_tp_2_cell_on_the_cpu_engine_records_what_the_tp_1_cell_does(one_and_two_processes):
    (one, _, _), (two, _, _) = one_and_two_processes
    argv = list(two.config.server_argv)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2" and two.config.server_env["VLLM_CPU_OMP_THREADS_BIND"]
    shape = {(r.job_id, r.turn): (r.prompt_tokens, r.completion_tokens) for r in one.requests}
    assert {(r.job_id, r.turn): (r.prompt_tokens, r.completion_tokens) for r in two.requests} == shape
    assert len(shape) > 8 and all(r.status is RequestStatus.OK for r in (*one.requests, *two.requests))


def test_a_tp_2_replica_answers_greedy_prompts_token_for_token_as_one_process_does(one_and_two_processes):
    (_, one, _), (_, two, _) = one_and_two_processes
    assert one == two and all(len(tokens) == GREEDY_TOKENS for tokens in one)


def _greedy_tokens(server_argv: tuple[str, ...], prompt: str) -> list[int]:
    argv = list(server_argv)
    url = f"http://{argv[argv.index('--host') + 1]}:{argv[argv.index('--port') + 1]}/v1/completions"
    body = {"model": argv[argv.index("--served-model-name") + 1], "prompt": prompt, "max_tokens": GREEDY_TOKENS,
            "min_tokens": GREEDY_TOKENS, "ignore_eos": True, "temperature": 0.0, "return_token_ids": True}  # fmt: skip
    answer = requests.post(url, json=body, timeout=60)
    answer.raise_for_status()
    return answer.json()["choices"][0]["token_ids"]
