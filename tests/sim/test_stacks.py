"""The simulator's engine stacks: the source study's gives the simulator as it was, a fitted one its own constants
and bands, every simulated GPU cell carries its stack (in its key unless the source study's), and a bad name is one
line listing the valid ones."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from orchestrator.analysis.load import sim_errors, sim_stacks
from orchestrator.cell.spec import EngineKind
from orchestrator.models.tiny import TINY_MODEL
from orchestrator.roofline.hardware import Calibration
from orchestrator.sim.error_bands import load_errors
from orchestrator.sim.stacks import DEFAULT_STACK, SOURCE_STUDY, get_stack, stack_names, stacks_errors
from orchestrator.sim.version import sim_version
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.spec import SweepSpec
from tests.sim.test_profile import KNOWN as CPU_PROFILE

SPEC = SweepSpec(name="stacks", engine=EngineKind.SIM, gpus=("H100",), policies=("fcfs",), jps=(2,),
                 model="meta-llama/Llama-3.1-8B-Instruct")  # fmt: skip


def test_the_source_studys_stack_is_the_shipped_calibration_and_bands():
    stack = get_stack(SOURCE_STUDY)
    assert stack.calibration() == Calibration.load() and stack.errors() == load_errors()


def test_the_default_stack_is_fitted_on_gpu_runs_with_its_own_constants_and_held_out_bands():
    stack = get_stack(DEFAULT_STACK)
    assert DEFAULT_STACK in stack_names() and "GPU cells of 5 runs on H100, H200" in stack.fitted_on()
    calibration = stack.calibration()
    assert calibration != Calibration.load() and calibration.lmcache_save_step_s == 0 < calibration.lmcache_store_s
    errors = stack.errors()
    assert set(errors.policies) >= {"fcfs", "continuum", "lmcache", "native-offload"}
    # Its runs measured the H100 and H200 (their error is in the held-out bands); the L40S adds its roofline's.
    assert errors.gpu_error("H100") == 0 and errors.gpu_error("L40S") == load_errors().gpu_error("L40S") > 0
    assert errors.policy_error("job-fcfs") == max(errors.policies.values())  # a policy its runs never measured


def test_cells_from_several_stacks_clear_the_widest_band_of_each_policy():
    both = stacks_errors([SOURCE_STUDY, DEFAULT_STACK])
    for policy in ("fcfs", "lmcache", "job-fcfs"):
        assert both.policy_error(policy) == max(get_stack(name).errors().policy_error(policy)
                                                for name in (SOURCE_STUDY, DEFAULT_STACK))  # fmt: skip


def test_a_simulated_gpu_cell_carries_its_stack_and_a_source_study_cell_keeps_its_key_from_before_stacks():
    [fitted], [source] = expand(SPEC), expand(SPEC.model_copy(update={"sim_stack": SOURCE_STUDY}))
    assert fitted.sim_stack == DEFAULT_STACK and fitted.params()["sim_stack"] == DEFAULT_STACK
    assert fitted.summary_columns()["sim_stack"] == DEFAULT_STACK
    assert source.key == source.model_copy(update={"sim_stack": None}).key != fitted.key
    [real] = expand(SPEC.model_copy(update={"engine": EngineKind.VLLM}))
    [cpu] = expand(SweepSpec(**SPEC.model_dump() | {"gpus": ("cpu",), "cpu_profile": CPU_PROFILE, "model": TINY_MODEL}))
    assert real.sim_stack is None and cpu.sim_stack is None  # measured, or the CPU engine's own profile


def test_an_unknown_stack_is_one_line_naming_the_valid_ones():
    with pytest.raises(ValueError, match=rf"unknown simulator stack 'vllm-0.1'; valid: {SOURCE_STUDY}, {DEFAULT_STACK}"):
        SweepSpec(**SPEC.model_dump() | {"sim_stack": "vllm-0.1"})


def test_the_simulators_version_names_its_stack_and_differs_by_stack():
    assert f"simulator {DEFAULT_STACK} data" in sim_version(DEFAULT_STACK)
    assert sim_version(DEFAULT_STACK).split()[-1] != sim_version(SOURCE_STUDY).split()[-1]


def test_a_summarys_stacks_and_bands_a_summary_from_before_stacks_being_the_source_studys():
    rows = pd.DataFrame({"engine": ["sim", "sim", "vllm"], "gpu": ["H100", "cpu", "H100"],
                         "sim_stack": [DEFAULT_STACK, None, None]})  # fmt: skip
    assert sim_stacks(rows) == [DEFAULT_STACK] and sim_errors(rows) == get_stack(DEFAULT_STACK).errors()
    assert sim_stacks(rows.drop(columns="sim_stack")) == [SOURCE_STUDY]


def test_calibrate_refuses_a_stack_fit_without_runs_or_onto_the_source_study(tmp_path):
    def refused(*argv: str) -> str:
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli.kvsweep", "calibrate", *argv], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert done.returncode == 2, done.stderr
        return done.stderr.strip().splitlines()[-1]

    assert "needs the GPU runs to fit on" in refused("--stack", "vllm-0.30")
    assert "fitted on the source study's files" in refused("--stack", SOURCE_STUDY, str(tmp_path))
    assert "not a GPU run's folder" in refused("--stack", "vllm-0.30", str(tmp_path), str(tmp_path))
