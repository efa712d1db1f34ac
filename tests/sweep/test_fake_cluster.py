"""Placement, concurrency, pending GPU types, a crashed replica's retry and fill runs on a fake GPU Ray cluster.
The placement test runs on two GPU types at once; the tests of fills, re-runs and dry runs need one type up and
one absent. No sweep here builds its report (test_report's)."""

import os
import signal
import threading
from dataclasses import replace

import pandas as pd
import pytest
from mlflow import MlflowClient

from orchestrator.crossover.search import SearchRounds
from orchestrator.inputs.validation import InputError
from orchestrator.records.cell import CellStatus
from orchestrator.sweep.runtime.driver import run_sweep
from orchestrator.sweep.runtime.tracking import default_tracking_uri
from tests.processes import FAKE_ENGINE_MODULE, fake_engine_processes, wait_for_serving, wait_until_gone
from tests.sweep.conftest import fake_spec, options, runs_by_key, summary

GRID = dict(gpus=("H100", "A100", "H200"), jps=(2, 3), dram_gb=(1,))
ONE_UP = GRID | {"gpus": ("H100", "H200")}


def test_cells_land_on_their_type_run_in_parallel_across_types_and_absent_types_pend(fake_gpu_nodes, tmp_path):
    code = run_sweep(fake_spec("placement", **GRID), options(tmp_path, report=False))
    rows = summary(tmp_path, "placement")
    assert code == 0  # pending cells make a partial run, not a failed one
    assert sorted(rows[rows.gpu == "H200"].status) == ["pending", "pending"]
    done = rows[rows.status == "done"]
    assert len(done) == 4 and set(done.gpu) == {"H100", "A100"}
    for row in done.itertuples():
        assert row.node_id == fake_gpu_nodes[row.gpu], f"{row.gpu} cell ran on another node"
        assert row.num_completed == row.num_jobs > 0
    h100, a100 = done[done.gpu == "H100"], done[done.gpu == "A100"]
    overlaps = [
        (h.cell_key, a.cell_key)
        for h in h100.itertuples()
        for a in a100.itertuples()
        if h.started_unix < a.finished_unix and a.started_unix < h.finished_unix
    ]
    assert overlaps, "no H100 cell ran while an A100 cell did"
    runs = runs_by_key(tmp_path, "placement")
    assert set(runs) == set(done.cell_key)  # pending cells never start a run
    preflights = pd.read_csv(tmp_path / "placement" / "preflight.csv")  # the reasons the regime table counts
    assert set(done.cell_key) <= set(preflights.cell_key) and preflights.reasons.str.contains("offered load").all()
    assert all([run.status for run in attempts] == [CellStatus.DONE] for attempts in runs.values())


def test_a_searchs_next_round_takes_the_replica_its_last_round_left_and_leaving_the_search_ends_it(
        fake_gpu_nodes, tmp_path):  # fmt: skip
    """Two rounds of one sweep, as a search runs them: the second round's new cell runs on the replica the first
    round's cell left (its reset proven, no start), and once the search is over no server is left."""
    spec = fake_spec("rounds", gpus=("H100",), jps=(2,))
    with SearchRounds(options(tmp_path)) as rounds:
        rounds.run(spec)
        rounds.run(spec.model_copy(update={"jps": (2, 3)}))
        assert fake_engine_processes(), "the round's replica went with its round"
    rows = summary(tmp_path, "rounds").set_index("jps")
    assert set(rows.status) == {"done"} and not rows.replica_reused[2] and rows.replica_start_s[2] > 0
    assert rows.replica_reused[3] and rows.node_id[3] == rows.node_id[2]
    assert wait_until_gone() == []


def test_a_re_run_with_a_new_load_level_runs_only_the_new_cells(fake_gpu_nodes, tmp_path):
    assert run_sweep(fake_spec("fill", **ONE_UP), options(tmp_path, report=False)) == 0
    first = runs_by_key(tmp_path, "fill")
    assert run_sweep(fake_spec("fill", **(ONE_UP | {"jps": (2, 3, 5)})), options(tmp_path, report=False)) == 0
    second = runs_by_key(tmp_path, "fill")
    assert {key: runs for key, runs in second.items() if key in first} == first  # untouched
    assert len(second) == len(first) + 1  # jps 5 on H100; H200 still pends
    rows = summary(tmp_path, "fill")
    assert sorted(rows.status.value_counts().items()) == [("done", 3), ("pending", 3)]


def test_a_replica_killed_mid_cell_fails_that_attempt_with_its_log_and_the_retry_is_done_once(fake_gpu_nodes, tmp_path):
    """The driver's retry of a crashed replica (no engine's behaviour in it: the worker sees its server's process
    exit, whatever serves): the killed attempt tracked as failed with its reason and server log, the cell done
    once, on its type's node."""
    killed: list[int] = []

    def mid_cell(counters: dict[str, float]) -> bool:
        return counters.get("vllm:generation_tokens_total", 0) > 0

    def crash_the_replica_mid_cell():
        killed.append(wait_for_serving(set(), FAKE_ENGINE_MODULE, mid_cell, timeout_s=60))
        os.killpg(killed[0], signal.SIGKILL)

    killer = threading.Thread(target=crash_the_replica_mid_cell)
    killer.start()
    workload = fake_spec("crash").workload.model_copy(update={"duration_s": 6})  # still running when found
    code = run_sweep(fake_spec("crash", gpus=("H100",), workload=workload), options(tmp_path, report=False))
    killer.join()
    assert code == 0 and killed
    (attempts,) = runs_by_key(tmp_path, "crash").values()
    assert [run.status for run in attempts] == [CellStatus.FAILED, CellStatus.DONE]
    client = MlflowClient(default_tracking_uri(tmp_path))
    tags = client.get_run(attempts[0].run_id).data.tags
    assert tags["reason"] == "replica exited with code -9 during the cell"
    assert {"server.log", "cell.json"} <= {artifact.path for artifact in client.list_artifacts(attempts[0].run_id)}
    (row,) = summary(tmp_path, "crash").itertuples()
    assert row.status == "done" and row.node_id == fake_gpu_nodes["H100"] and row.num_completed == row.num_jobs > 0


def test_a_dram_budget_larger_than_the_node_stops_before_anything_is_tracked(fake_gpu_nodes, tmp_path):
    """Against the memory the fake H100 node declares (4 GiB): a GPU type's nodes, not the head, set the limit."""
    with pytest.raises(InputError, match="DRAM budget 5 GiB is larger than any H100 node"):
        run_sweep(fake_spec("too-big", **(GRID | {"dram_gb": (5,)})), options(tmp_path, report=False))
    assert not (tmp_path / "mlflow.db").exists()


def test_dry_run_shows_done_pending_and_placement_without_running(fake_gpu_nodes, tmp_path, capsys):
    assert run_sweep(fake_spec("dry", **ONE_UP), options(tmp_path, report=False, dry_run=True)) == 0
    assert not (tmp_path / "mlflow.db").exists()
    assert run_sweep(fake_spec("dry", **(ONE_UP | {"jps": (2,)})), options(tmp_path, report=False)) == 0
    capsys.readouterr()
    run_sweep(fake_spec("dry", **ONE_UP), options(tmp_path, report=False, dry_run=True))
    out = capsys.readouterr().out
    assert "H100: up (1 GPUs on 1 node(s)); 1 slot(s) on 1 node(s)" in out and "H200: absent: cells pend" in out
    assert out.count("done (skipped)") == 1 and out.count("pending: no H200 in the cluster and none its autoscaler can launch") == 2
    assert out.count("run on a H100 slot") == 1


def test_a_forced_re_run_supersedes_the_old_run_so_one_run_per_cell_stays_done(fake_gpu_nodes, tmp_path):
    grid = GRID | {"gpus": ("H100",), "jps": (2,)}
    assert run_sweep(fake_spec("rerun", **grid), options(tmp_path, report=False)) == 0
    first_rows = summary(tmp_path, "rerun")
    assert run_sweep(fake_spec("rerun", **grid), options(tmp_path, report=False, rerun=True)) == 0
    (runs,) = runs_by_key(tmp_path, "rerun").values()
    assert [run.status for run in runs] == [CellStatus.SUPERSEDED, CellStatus.DONE]
    rows = summary(tmp_path, "rerun")
    assert len(rows) == 1 and rows.run_id[0] == runs[1].run_id != first_rows.run_id[0]


def test_a_worker_that_cannot_start_costs_no_cell_an_attempt_and_its_slot_is_given_up(fake_gpu_nodes, tmp_path, monkeypatch):
    """A node Ray lists but cannot place on (here one that does not exist; on a real cluster a node that has
    just joined, for a moment): the worker is created again, never charged to a cell, then given up."""
    from orchestrator.sweep.cluster.inventory import NodeInfo
    from orchestrator.sweep.runtime import driver

    def with_a_phantom_l40s(launchable=()):
        inventory = read_inventory(launchable)
        phantom = NodeInfo("ab" * 28, "10.0.0.9", "L40S", num_gpus=1, memory_gib=100.0)
        return replace(inventory, nodes=(*inventory.nodes, phantom))

    read_inventory = driver.read_inventory
    monkeypatch.setattr(driver, "read_inventory", with_a_phantom_l40s)
    grid = GRID | {"gpus": ("L40S", "H100"), "jps": (2,)}
    assert run_sweep(fake_spec("phantom", **grid), options(tmp_path, report=False)) == 0
    rows = summary(tmp_path, "phantom").set_index("gpu")
    assert rows.loc["H100", "status"] == "done"
    assert rows.loc["L40S", "status"] == "pending" and rows.loc["L40S", "reason"].startswith("no L40S worker could start")
    assert set(runs_by_key(tmp_path, "phantom")) == {rows.loc["H100", "cell_key"]}  # no attempt for the L40S cell


def test_a_model_no_node_can_read_stops_the_sweep_in_preflight_and_dummy_weights_run_it(fake_gpu_nodes, tmp_path):
    """The default model of the source study with no Hugging Face access: one line before any cell, naming the
    model and --weights dummy; the same sweep with dummy weights serves its config and the project's tokenizer.
    On the fake H100 node: the preflight asks the type's own nodes whether they can read the model."""
    from orchestrator.models.served import Weights

    llama = dict(gpus=("H100",), jps=(2,), model="meta-llama/Llama-3.1-8B-Instruct")
    with pytest.raises(InputError) as refused:
        run_sweep(fake_spec("no-weights", **llama), options(tmp_path, report=False))
    line = str(refused.value)
    assert "\n" not in line and "'meta-llama/Llama-3.1-8B-Instruct'" in line and "--weights dummy" in line
    assert "H100 node" in line and "Hugging Face cache" in line
    assert not (tmp_path / "mlflow.db").exists()
    assert run_sweep(fake_spec("dummy-weights", **llama, weights=Weights.DUMMY), options(tmp_path, report=False)) == 0
    rows = summary(tmp_path, "dummy-weights")
    assert list(rows.status) == ["done"] and list(rows.weights) == ["dummy"]
    assert rows.num_completed[0] == rows.num_jobs[0] > 0
    (runs,) = runs_by_key(tmp_path, "dummy-weights").values()
    from mlflow import MlflowClient

    run = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").get_run(runs[0].run_id)
    assert run.data.params["weights"] == "dummy" and run.data.tags["weights"] == "dummy"
