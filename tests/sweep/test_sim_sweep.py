"""A sweep on the simulator goes through the same driver, records, tracking and report as a real one (the sweeps
here that check what is tracked run through the driver on Ray; those that check records and reports alone are
written in this process, ``tests.simulated``)."""

import json
import re

import pandas as pd
import pytest

from orchestrator.cell.cell_json import read_cell_json
from orchestrator.cell.spec import EngineKind
from orchestrator.records.cell import CellStatus
from orchestrator.records.scheduler_trace_file import trace_file_frame
from orchestrator.records.verdict import read_verdicts
from orchestrator.sim.stacks import DEFAULT_STACK, get_stack
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import SweepSpec
from orchestrator.sweep.runtime.driver import run_sweep
from orchestrator.sweep.runtime.tracking import default_tracking_uri, runs_page
from orchestrator.workload.distributions import PRESETS
from orchestrator.workload.schedule import schedule_for
from orchestrator.workload.spec import WorkloadSpec
from tests.sim.test_profile import KNOWN as CPU_PROFILE
from tests.simulated import simulated_sweep
from tests.sweep.conftest import options, runs_by_key, summary

# A GPU type the cluster has and one it lacks, a policy with a CPU tier and one without, at a load where the L40S's
# tier is busy: what the checks below read.
SPEC = SweepSpec(
    name="simulated",
    engine=EngineKind.SIM,
    gpus=("H100", "L40S"),
    policies=("fcfs", "lmcache"),
    jps=(8,),
    dram_gb=(100,),
    model="meta-llama/Llama-3.1-8B-Instruct",
    workload=WorkloadSpec(jps=1, duration_s=20),
)


@pytest.fixture(scope="module")
def simulated(ray_cluster, tmp_path_factory):
    results = tmp_path_factory.mktemp("sim")
    assert run_sweep(SPEC, options(results)) == 0
    return results


def test_every_cell_is_simulated_done_and_tagged_sim_even_for_gpu_types_the_cluster_lacks(simulated):
    rows = summary(simulated, "simulated")
    assert len(rows) == 4 and set(rows.status) == {"done"} and set(rows.engine) == {"sim"}
    assert (rows.num_completed == rows.num_jobs).all() and (rows.num_jobs > 0).all()
    assert set(rows.sim_stack) == {DEFAULT_STACK}  # the engine stack every simulated cell ran, by default the newest
    from mlflow import MlflowClient

    client = MlflowClient(default_tracking_uri(simulated))
    # The UI opens the sweep on its runs, not on MLflow 3's GenAI overview.
    assert client.get_experiment_by_name("simulated").tags["mlflow.experimentKind"] == "custom_model_development"
    for row in rows.itertuples():
        run = client.get_run(row.run_id)
        assert run.data.tags["engine"] == "sim" and run.data.tags["status"] == "done"
        assert run.data.params["engine"] == "sim" and run.data.params["sim_stack"] == DEFAULT_STACK


def test_a_simulated_cell_has_the_records_trace_and_configuration_of_a_real_one(simulated):
    rows = summary(simulated, "simulated")
    key = rows[(rows.gpu == "L40S") & (rows.policy == "lmcache") & (rows.jps == 8)].cell_key.item()
    cell_dir = simulated / "simulated" / "cells" / key
    requests, jobs = pd.read_parquet(cell_dir / "requests.parquet"), pd.read_parquet(cell_dir / "jobs.parquet")
    assert len(requests) == 8 * len(jobs)
    trace = trace_file_frame(cell_dir / "scheduler_trace.parquet")
    assert (trace.kind == "finish").sum() == len(requests)
    assert trace[trace.kind == "step"].eval("prefill_tokens + decode_tokens").max() <= 2048  # L40S's budget
    config = read_cell_json(cell_dir / "cell.json")
    assert config.engine.kind == "sim" and config.engine.scheduler.max_num_batched_tokens == 2048
    assert config.simulation.tier_counters == config.tier_counters and config.cell.gpu == "L40S"
    assert config.tier_counters.kv_offload_store_bytes > 0 and config.engine_facts.device_name == "simulated L40S"
    row = rows[rows.cell_key == key].iloc[0]
    assert row.num_evicted_blocks == config.num_evicted_blocks == config.simulation.evicted_blocks


def test_a_re_run_of_a_finished_simulated_sweep_runs_nothing_and_ends_on_its_runs_page(simulated, capsys):
    before = runs_by_key(simulated, "simulated")
    assert run_sweep(SPEC, options(simulated)) == 0
    assert runs_by_key(simulated, "simulated") == before
    assert all([run.status for run in runs] == [CellStatus.DONE] for runs in before.values())
    from mlflow import MlflowClient

    uri = default_tracking_uri(simulated)
    experiment_id = MlflowClient(uri).get_experiment_by_name("simulated").experiment_id
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == (f"[simulated] MLflow runs: http://127.0.0.1:5000/#/experiments/{experiment_id}/runs "
                    f"(start the UI: mlflow ui --backend-store-uri {uri})")  # fmt: skip


def test_on_a_tracking_server_the_runs_page_is_the_servers_own():
    assert runs_page("https://mlflow.example.org/", "7") == "https://mlflow.example.org/#/experiments/7/runs"
    # Credentials in the URI are MLflow's to use, never the sweep's to print.
    assert runs_page("https://alice:s3cret@mlflow.example.org", "7") == "https://mlflow.example.org/#/experiments/7/runs"
    assert "s3cret" not in runs_page("postgresql://alice:s3cret@db.example.org/mlflow", "7")


def test_the_report_labels_every_table_as_simulated_with_its_stack_and_gives_the_stacks_errors(simulated):
    page = (simulated / "simulated" / "report" / "report.html").read_text()
    assert f"simulated, {DEFAULT_STACK}" in page and "measured on real vLLM" not in page
    stacks = pd.read_csv(simulated / "simulated" / "report" / "tables" / "sim_stacks.csv")
    assert set(stacks["stack"]) == {DEFAULT_STACK} and {"fcfs", "lmcache"} <= set(stacks.policy)
    bands = get_stack(DEFAULT_STACK).errors().policies
    assert all(row.error_pct == round(bands[row.policy] * 100, 1) for row in stacks.itertuples())


def test_the_cpu_engine_is_simulated_from_the_profile_measured_on_this_machine(tmp_path):
    spec = SweepSpec(name="cpu-sim", engine=EngineKind.SIM, gpus=("cpu",), policies=("fcfs", "continuum"), jps=(2,),
                     workload=WorkloadSpec(jps=1, duration_s=10, scale=0.25), cpu_profile=CPU_PROFILE)  # fmt: skip
    simulated_sweep(spec, tmp_path)
    rows = summary(tmp_path, "cpu-sim")
    assert set(rows.status) == {"done"} and set(rows.engine) == {"sim"} and (rows.num_completed == rows.num_jobs).all()
    for key in rows.cell_key:
        config = read_cell_json(tmp_path / "cpu-sim" / "cells" / key / "cell.json")
        assert config.engine_facts.num_kv_blocks == CPU_PROFILE.num_kv_blocks
        assert config.engine.scheduler.block_size == CPU_PROFILE.block_size
        assert config.engine.calibration.request_overhead_s == CPU_PROFILE.request_overhead_s


def test_a_parametric_agent_sweep_runs_jobs_of_different_lengths_on_one_schedule_per_load(ray_cluster, tmp_path):
    agent = WorkloadSpec(jps=1, duration_s=15, num_turns=PRESETS["agent-turns"], tool_tokens=PRESETS["agent-tool-tokens"],
                         output_tokens=PRESETS["agent-output-tokens"], tool_time_s=PRESETS["swe-agent-tool-time"],
                         max_context=10_000)  # fmt: skip
    spec = SweepSpec(name="agents", engine=EngineKind.SIM, gpus=("H100",), policies=("fcfs", "continuum"), jps=(2,),
                     model="meta-llama/Llama-3.1-8B-Instruct", workload=agent)  # fmt: skip
    assert run_sweep(spec, options(tmp_path)) == 0
    rows = summary(tmp_path, "agents")
    assert set(rows.status) == {"done"} and set(rows.workload_source) == {"parametric"}
    assert rows.schedule_fingerprint.nunique() == 1  # both policies ran the identical jobs
    assert rows.tool_time_s.iloc[0] == pytest.approx(PRESETS["swe-agent-tool-time"].mean)
    schedule = schedule_for(expand(spec)[0].workload)
    # Three of the 33 jobs have a request over 10,000 tokens: left out whole, counted per cell and in the report.
    assert set(rows.max_context) == {10_000} and set(rows.num_jobs_dropped) == {3} == {len(schedule.dropped_jobs)}
    assert (rows.num_jobs == 30).all()
    assert "--max-context 10,000 tokens dropped 6 jobs whole" in (tmp_path / "agents" / "report" / "report.html").read_text()
    planned = {(job.job_id, turn.turn): turn.output_tokens for job in schedule.jobs for turn in job.turns}
    for key in rows.cell_key:
        requests = pd.read_parquet(tmp_path / "agents" / "cells" / key / "requests.parquet")
        assert dict(zip(zip(requests.job_id, requests.turn), requests.completion_tokens)) == planned
        assert requests.groupby("job_id").turn.max().nunique() > 3  # 8 to 15 turns
    latency = pd.read_csv(tmp_path / "agents" / "report" / "tables" / "per_turn_latency_h100.csv")
    assert {"T15", "n_T15", "T-last/T1"} <= set(latency.columns)
    assert (latency.n_T15 < latency.n_T1).all()
    # Continuum's fixed 2 s TTL against SWE tool times: some tool calls outlast it, and the report counts them.
    pins = pd.read_csv(tmp_path / "agents" / "report" / "tables" / "pin_outcomes_h100.csv")
    assert list(pins.policy) == ["continuum"] and pins.num_pins.item() > 100
    assert 0 < pins.pin_expired_pct.item() < 20 and pins.pin_carried_pct.item() > 70
    assert pins.pin_in_vain_block_s.item() > 0
    from mlflow import MlflowClient

    run = MlflowClient(default_tracking_uri(tmp_path)).get_run(rows.run_id.iloc[0])
    assert run.data.tags["workload_source"] == "parametric" and run.data.params["workload.source"] == "parametric"
    assert json.loads(run.data.params["workload.tool_time_s"])["kind"] == "mixture"


def test_the_agent_trace_sweep_replays_its_trace_at_each_load_and_reports_turns_and_pins(tmp_path):
    from orchestrator.workload.traces.schema import load_trace
    from orchestrator.sweeps.agent_trace import SPEC as AGENT_TRACE
    from orchestrator.sweeps.agent_trace import TRACE
    from tests.sweep.test_report import rendered_dom

    native = load_trace(TRACE).native_jps
    spec = AGENT_TRACE.model_copy(update={"engine": EngineKind.SIM, "gpus": ("H100",), "dram_gb_by_gpu": {},
                                          "policies": ("fcfs", "continuum"), "jps": (native, 4 * native)})  # fmt: skip
    simulated_sweep(spec, tmp_path, report=True)
    rows = summary(tmp_path, "agent_trace")
    assert set(rows.status) == {"done"} and set(rows.workload_source) == {"trace"}
    assert sorted(rows.load_multiplier.round(6).unique()) == [1, 4]
    assert (rows.num_jobs == 24).all() and (rows.num_completed == 24).all()
    assert rows.groupby("jps").schedule_fingerprint.nunique().eq(1).all()  # one schedule per load for both
    tables = tmp_path / "agent_trace" / "report" / "tables"
    latency = pd.read_csv(tables / "per_turn_latency_h100.csv")
    assert {"T1", "T10", "n_T3", "n_T10", "T-last/T1"} <= set(latency.columns) and "T11" not in latency
    by_context = pd.read_csv(tables / "latency_by_context_h100.csv")
    assert set(by_context.context) == {"<1K", "1-2K", "2-4K"}  # the trace's prompts reach 3,161 tokens
    assert by_context.groupby(["policy", "jps"]).n.sum().eq(164).all()
    pins = pd.read_csv(tables / "pin_outcomes_h100.csv")
    assert list(pins.policy) == ["continuum", "continuum"] and (pins.pin_expired_pct > 0).all()  # 3 s tools, 2 s TTL
    dom = rendered_dom(tmp_path / "agent_trace" / "report" / "report.html")
    assert "what became of the pins" in dom and "n_T10" in dom and 'id="latency_by_context_h100"' in dom and 'id="pin_outcomes_h100"' in dom


def test_a_cell_with_a_request_past_max_model_len_fails_before_it_runs_and_is_not_retried():
    from orchestrator.sweep.planning.spec import EngineOptions, RunLimits
    from orchestrator.sweep.runtime.worker import CellWorker

    cell = expand(SPEC)[0]
    cell = cell.model_copy(update={"engine_options": EngineOptions(max_model_len=4096)})
    outcome = CellWorker().run(cell, RunLimits())
    assert outcome.status is CellStatus.FAILED and not outcome.retryable and outcome.requests == ()
    assert "need more than max_model_len 4096 tokens (prompt and answer; the longest 12615)" in outcome.reason


def test_a_grid_of_replicas_and_routers_compares_each_policy_with_each_router(tmp_path):
    spec = SweepSpec(name="routed", engine=EngineKind.SIM, gpus=("L40S",), policies=("fcfs", "continuum"), jps=(8,),
                     dram_gb=(32,), replicas=(2,), routers=("session-affinity", "round-robin"),
                     model="meta-llama/Llama-3.1-8B-Instruct", workload=WorkloadSpec(jps=1, duration_s=10))  # fmt: skip
    simulated_sweep(spec, tmp_path, report=True)
    rows = summary(tmp_path, "routed")
    assert set(rows.status) == {"done"} and set(rows.replicas) == {2}
    assert set(rows.router) == {"session-affinity", "round-robin"}
    moved = rows.set_index(["policy", "router"]).turns_moved_pct
    assert moved[("continuum", "session-affinity")] < 10 < moved[("continuum", "round-robin")]
    report = tmp_path / "routed" / "report"
    page = (report / "report.html").read_text()
    assert "Policies and routers" in page
    # Each arm's cell in detail on its own page, linked, with its steps binned per replica.
    pages = sorted(re.findall(r'<a href="(cells/[^"]+\.html)">', page))
    assert pages == [f"cells/l40s_{arm}_x2.html" for arm in ("continuum-round-robin", "continuum-session-affinity",
                                                             "fcfs-round-robin", "fcfs-session-affinity")]  # fmt: skip
    detail = (report / pages[0]).read_text()
    assert "engine steps (300 bins over the run)" in detail and 'href="../tables/per_replica_' in detail
    assert len(pd.read_csv(report / "tables" / "per_replica_l40s_continuum-round-robin_x2.csv")) == 2
    (verdict,) = read_verdicts(report / "tables" / "verdicts.csv")
    assert verdict.replicas == 2 and {*verdict.tied_with, verdict.leader} <= {
        f"{policy} @ {router}" for policy in spec.policies for router in ("session-affinity", "round-robin")}
    table = pd.read_csv(report / "tables" / "policy_router.csv")
    assert list(table.kv_policy) == ["continuum", "fcfs"] and "round-robin: prefix_kept_pct" in table
