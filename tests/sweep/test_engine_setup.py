"""A cell's engine is decided in one place (``orchestrator.policies.engine_setup``): the real replica's flags, the simulated engine
and the sizing all read the same settings, with the device's defaults filled in once."""

from __future__ import annotations

from orchestrator.cell.spec import EngineKind
from orchestrator.models.arch import load_model
from orchestrator.models.served import ServedModel, Weights
from orchestrator.sim.cell_engine import cell_sim_engine
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.serving import served_cell
from orchestrator.sweep.planning.spec import EngineOptions, SweepSpec
from orchestrator.workload.spec import WorkloadSpec

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _cells(**spec):
    return {(cell.gpu, cell.policy): cell for cell in expand(SweepSpec(name="setup", jps=(1,), workload=WorkloadSpec(jps=1),
                                                                      **spec))}  # fmt: skip


def test_the_device_defaults_are_filled_in_once_and_the_replica_and_the_simulator_read_them():
    cells = _cells(engine=EngineKind.SIM, gpus=("H100",), policies=("fcfs", "lmcache-nocache"), dram_gb=(64,),
                   model=LLAMA, engine_options=EngineOptions(num_kv_blocks=3000, max_num_seqs=128))  # fmt: skip
    gpu = cells["H100", "fcfs"].engine_setup
    assert (gpu.block_size, gpu.enforce_eager, gpu.num_kv_blocks, gpu.max_num_seqs) == (16, False, 3000, 128)
    assert gpu.tier_gib == 0 and cells["H100", "lmcache-nocache"].engine_setup.tier_gib == 1.0  # its fixed tier
    scheduler = cell_sim_engine(gpu, cells["H100", "fcfs"].workload).scheduler
    assert (scheduler.block_size, scheduler.num_blocks, scheduler.max_num_seqs) == (16, 3000, 128)
    served = served_cell(cells["H100", "fcfs"], ServedModel("/models/llama", Weights.DUMMY)).engine
    assert (served.block_size, served.num_kv_blocks, served.max_num_seqs, served.enforce_eager) == (16, 3000, 128, False)
    sizing = cells["H100", "lmcache-nocache"].engine_setup.sizing(load_model(LLAMA))
    assert sizing.cpu_kv_tokens is not None and sizing.cpu_kv_tokens < gpu.sizing(load_model(LLAMA)).gpu_kv_tokens


def test_a_cpu_cell_runs_eager_on_blocks_of_32():
    cpu = _cells(engine=EngineKind.VLLM, gpus=("cpu",), policies=("fcfs",),
                 engine_options=EngineOptions(num_kv_blocks=2400))["cpu", "fcfs"].engine_setup  # fmt: skip
    assert (cpu.device, cpu.block_size, cpu.enforce_eager) == ("cpu", 32, True)
