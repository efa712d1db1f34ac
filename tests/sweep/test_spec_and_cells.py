from dataclasses import replace

import pytest
from pydantic import ValidationError

from orchestrator.cell.spec import EngineKind
from orchestrator.cli.sweep import apply_flags, parser
from orchestrator.inputs.validation import one_line
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import EngineOptions, RunLimits, SweepSpec
from orchestrator.workload.spec import WorkloadSpec
from tests.sim.test_profile import KNOWN as PROFILE


def spec(**overrides) -> SweepSpec:
    fields = dict(name="t", gpus=("H100", "A100"), policies=("fcfs", "continuum"), jps=(1, 3), dram_gb=(64,))
    return SweepSpec(**(fields | overrides))


def test_the_grid_is_the_full_product_with_neighbours_sharing_a_server():
    cells = expand(spec(seeds=(1, 2), dram_gb_by_gpu={"A100": (32, 64)}))
    assert len(cells) == 2 * 2 * 2 * 1 + 2 * 2 * 2 * 2  # policies x jps x seeds x DRAM: H100 has 1 level, A100 2
    assert len({cell.key for cell in cells}) == len(cells)
    groups = [cell.server_group for cell in cells]
    # Each server configuration appears as one contiguous run, so a worker can keep its replica.
    assert len(groups) - sum(a == b for a, b in zip(groups, groups[1:])) == len(set(groups))


def test_growing_a_grid_keeps_the_keys_of_the_cells_already_in_it():
    before = {cell.key for cell in expand(spec())}
    after = {cell.key for cell in expand(spec(gpus=("H100", "A100", "L40S"), jps=(1, 3, 6), name="renamed"))}
    assert before < after and len(after) == 3 * 2 * 3


@pytest.mark.parametrize(
    "change",
    [
        {"policies": ("continuum",)},
        {"dram_gb": (65,)},
        {"model": "other"},
        {"workload": WorkloadSpec(jps=1, scale=0.5)},
        {"engine_options": EngineOptions(max_num_seqs=8)},
        {"engine": EngineKind.FAKE},
    ],
)
def test_anything_that_can_change_a_result_changes_the_key(change):
    base = expand(spec(policies=("fcfs",), gpus=("H100",), jps=(1,)))[0]
    changed = expand(spec(**({"policies": ("fcfs",), "gpus": ("H100",), "jps": (1,)} | change)))[0]
    assert base.key != changed.key


def test_auto_runs_real_vllm_on_the_gpu_types_the_cluster_has_and_simulates_the_others():
    cells = expand(spec(engine=EngineKind.AUTO, model="llama-3.1-8b-instruct"), has_gpu=lambda gpu: gpu == "H100")
    assert {(cell.gpu, cell.engine, cell.placement) for cell in cells} == {
        ("H100", EngineKind.VLLM, "H100"),
        ("A100", EngineKind.SIM, "sim"),
    }
    assert all("(sim)" in cell.label for cell in cells if cell.engine is EngineKind.SIM)
    assert {cell.engine for cell in expand(spec(engine=EngineKind.AUTO))} == {EngineKind.VLLM}


def test_run_limits_are_not_part_of_the_key():
    assert expand(spec())[0].key == expand(spec(limits=RunLimits(max_attempts=5, hang_timeout_s=9)))[0].key


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"gpus": ("X100",)}, "unknown GPU type 'X100'; known: B200, H200, H100, A100, L40S, L4, cpu"),
        ({"policies": ("nope",)}, "unknown policy 'nope'; known: fcfs, job-fcfs"),
        ({"jps": (1, 0)}, "jobs per second must be positive, got 0"),
        ({"dram_gb": (-1,)}, "a DRAM budget must be 0 or more GiB, got -1"),
        ({"gpus": ("cpu",), "policies": ("fcfs", "lmcache")}, "policy 'lmcache' needs a CUDA GPU and cannot run on the cpu"),
        ({"engine": EngineKind.SIM, "gpus": ("H100", "cpu"), "model": "llama-3.1-8b-instruct"},
         "the simulator models the cpu device only from a profile measured on this machine"),
        ({"engine": EngineKind.SIM, "model": "no/such-model"}, "unknown model 'no/such-model'"),
        ({"gpus": ("cpu",), "engine_options": EngineOptions(num_kv_blocks=400)},
         "num_kv_blocks 400 x block size 32 = 12800 tokens cannot hold one max_model_len (16384) sequence; use at least 512"),
        ({"tp": (3,)}, "tensor-parallel degree 3 is not one of 1, 2, 4, 8"),
        ({"tp": (1,), "model": "llama-3.1-70b", "engine": EngineKind.SIM},
         "--tp 1: llama-3.1-70b on 1 H100 GPU(s) at utilization 0.85 leaves too small a KV pool for one "
         "16384-token sequence; valid on H100: --tp 4,8"),
        ({"tp": (4,), "gpus": ("cpu",)}, "--tp 4 for tiny: vLLM splits the 2 attention heads evenly over the ranks"),
    ],
)
def test_bad_grids_are_one_line_naming_the_value_and_the_valid_ones(override, expected):
    with pytest.raises(ValidationError) as caught:
        spec(**override)
    line = one_line(caught.value)
    assert expected in line and "\n" not in line


def test_flags_override_the_scripts_grid_and_take_commas_or_spaces():
    base = spec(dram_gb_by_gpu={"H100": (400,), "A100": (200,)})
    args = parser(base).parse_args(["--jps", "1,6", "10", "--gpus", "A100", "--duration-s", "5", "--kv-blocks", "2000",
                                    "--start-stall-s", "60"])  # fmt: skip
    changed = apply_flags(base, args)
    assert changed.jps == (1, 6, 10) and changed.gpus == ("A100",) and changed.limits.start_stall_s == 60
    assert changed.dram_for("A100") == (200,)  # the script's per-GPU budget survives
    assert changed.workload.duration_s == 5 and changed.engine_options.num_kv_blocks == 2000
    flat = apply_flags(base, parser(base).parse_args(["--dram-gb", "100"]))
    assert flat.dram_for("H100") == flat.dram_for("A100") == (100,)


def test_trials_are_cells_of_their_own_with_seeds_fixed_by_the_base_seed_and_trial_one_keeps_its_key():
    one = expand(spec(policies=("fcfs",), gpus=("H100",), jps=(1,)))
    three = expand(spec(policies=("fcfs",), gpus=("H100",), jps=(1,), trials=3))
    assert [cell.seed for cell in three][0] == 42 and len({cell.seed for cell in three}) == 3
    assert one[0].key == three[0].key and len({cell.key for cell in three}) == 3
    assert [cell.seed for cell in expand(spec(trials=3))] == [cell.seed for cell in expand(spec(trials=3))]
    flags = parser(spec()).parse_args(["--trials", "2"])
    assert apply_flags(spec(), flags).trials == 2
    with pytest.raises(ValidationError) as error:
        apply_flags(spec(), parser(spec()).parse_args(["--trials", "0"]))
    assert "trials" in one_line(error.value)


def test_a_simulated_cell_of_the_cpu_engine_carries_the_measured_profile_in_its_key_and_a_measured_one_does_not():
    cpu = {"gpus": ("cpu",), "policies": ("fcfs",), "jps": (1,), "dram_gb": (0,)}
    (simulated,) = expand(spec(engine=EngineKind.SIM, cpu_profile=PROFILE, **cpu))
    (measured,) = expand(spec(engine=EngineKind.VLLM, cpu_profile=PROFILE, **cpu))
    (unprofiled,) = expand(spec(engine=EngineKind.VLLM, **cpu))
    assert simulated.cpu_profile == PROFILE and measured.cpu_profile is None and measured.key == unprofiled.key
    (reprofiled,) = expand(spec(engine=EngineKind.SIM, cpu_profile=replace(PROFILE, step_overhead_s=0.003), **cpu))
    assert reprofiled.key != simulated.key
    assert simulated.params()["cpu_profile.step_overhead_s"] == "0.002"
    assert "cpu_profile.block_size" not in measured.params()


def test_the_tracking_client_retries_an_absent_store_until_its_patience_and_passes_other_errors_at_once(monkeypatch):
    """The retry rules, on a stand-in client: refused connections are waited out (each wait said), past the patience the
    sweep stops in one line, an answer the store gave is raised at once, and a full disk under it stops the sweep."""
    import requests
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, TEMPORARILY_UNAVAILABLE

    from orchestrator.sweep.runtime import tracking
    from orchestrator.sweep.runtime.stops import DiskFull, TrackingUnavailable

    monkeypatch.setattr(tracking, "retry_delays", lambda: iter([0.01] * 1000))
    failures = {"left": 2}

    class Store:
        def set_tag(self, error):
            if failures["left"]:
                failures["left"] -= 1
                raise error
            return "set"

    waits = []
    client = tracking.RetryingClient(Store(), "http://mlflow:5000", None, patience_s=5.0, on_wait=waits.append)
    assert client.set_tag(requests.ConnectionError("refused")) == "set" and len(waits) == 2
    assert "tracking store at http://mlflow:5000 not answering (set_tag: refused); try 2 in 0.01 s" in waits[0]
    failures["left"] = 10**6
    client.patience_s = 0.05
    with pytest.raises(TrackingUnavailable, match=r"the tracking store at http://mlflow:5000 did not answer for 0 s \("):
        client.set_tag(MlflowException("API request failed", error_code=TEMPORARILY_UNAVAILABLE))
    failures["left"] = 1
    with pytest.raises(MlflowException, match="no such run"):
        client.set_tag(MlflowException("no such run", error_code=RESOURCE_DOES_NOT_EXIST))
    failures["left"] = 1
    with pytest.raises(DiskFull, match="while writing to the tracking store \\(set_tag\\): .*database or disk is full"):
        client.set_tag(MlflowException("(sqlite3.OperationalError) database or disk is full"))


LLAMA_70B = "llama-3.1-70b"


def test_tensor_parallel_cells_name_their_degree_and_only_a_degree_past_one_enters_the_key():
    one, four = expand(spec(gpus=("H100",), policies=("fcfs",), jps=(1,), tp=(1, 4), model=LLAMA_70B,
                            engine=EngineKind.FAKE))  # fmt: skip
    plain = expand(spec(gpus=("H100",), policies=("fcfs",), jps=(1,), model=LLAMA_70B, engine=EngineKind.FAKE))[0]
    assert (one.tp, four.tp) == (1, 4) and one.key != four.key
    assert one.key == expand(spec(gpus=("H100",), policies=("fcfs",), jps=(1,), model=LLAMA_70B,
                                  engine=EngineKind.FAKE, tp=(1,)))[0].key  # fmt: skip
    assert "tp=4" in four.label and "tp=" not in one.label and four.params()["tp"] == "4"
    assert (one.gang_groups, four.gang_groups) == ((), (4,)) and four.server_group != one.server_group
    # A replica's host memory is per rank; each of its four slots reserves a quarter of it.
    vllm = four.model_copy(update={"engine": EngineKind.VLLM, "policy": "native-offload"})
    assert vllm.replica_host_gib == 64 + 4 * 16 and vllm.slot_host_gib == (64 + 4 * 16) / 4
    routed = four.model_copy(update={"replicas": 2, "router": "round-robin"})
    assert routed.gang_groups == (4, 4) and routed.gang_size == 8
    assert plain.tp == 4  # the sizing's default for the 70B on an 80 GB H100: see tests/sizing/test_parallel.py


def test_the_degrees_are_resolved_when_the_spec_is_made_or_copied_so_the_grid_expands_without_the_model(monkeypatch):
    made = spec(gpus=("H100",), policies=("fcfs",), jps=(1,), model=LLAMA_70B, engine=EngineKind.FAKE)
    moved = made.model_copy(update={"gpus": ("H200", "B200")})  # pydantic's copy alone would keep the H100's
    roomier = made.model_copy(update={"engine_options": made.engine_options.model_copy(
        update={"gpu_memory_utilization": 0.95})})  # fmt: skip
    monkeypatch.setattr("orchestrator.sweep.planning.spec.load_model", lambda name: pytest.fail(f"{name} read again"))
    assert [cell.tp for cell in expand(made)] == [4]
    assert [cell.tp for cell in expand(moved)] == [2, 1]  # more memory per GPU, fewer GPUs to hold the 70B
    assert [cell.tp for cell in expand(roomier)] == [2]
    # The CPU engine runs one process per replica: its degree needs no model read at all.
    cpu_only = spec(gpus=("cpu",), policies=("fcfs",), jps=(1,), dram_gb=(0,), model=LLAMA_70B, engine=EngineKind.FAKE)
    assert cpu_only.tp_for("cpu") == (1,)


def test_the_default_degree_leaves_every_8b_sweep_at_one_gpu_per_replica_and_its_keys_as_they_were():
    cells = expand(spec(gpus=("H100", "A100", "L40S", "L4", "H200", "B200"), model="llama-3.1-8b-instruct"))
    assert {cell.tp for cell in cells} == {1} and all("tp" not in cell.model_dump(exclude_defaults=True) for cell in cells)


def test_the_tp_flag_sets_the_degrees():
    base = spec(model=LLAMA_70B, engine=EngineKind.FAKE)
    assert apply_flags(base, parser(base).parse_args(["--tp", "1,4"])).tp == (1, 4)
