"""Guard rails for reworking the workload (docs/design/agent-workloads.md, commit 0): the keys of done
cells and the bytes of the source study's traffic are pinned, so a change that re-keys every stored result
or alters what the load generator sends fails here first, not in a user's half-filled sweep.

A deliberate change updates the pinned values in the same commit and says why: a new cell key leaves every
done cell of every sweep behind (bump ``KEY_VERSION``), and new traffic makes new results incomparable
with old ones."""

from __future__ import annotations

from orchestrator.cell.spec import EngineKind
from orchestrator.roofline.hardware import CpuProfile
from orchestrator.sim.stacks import SOURCE_STUDY
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.runtime.profiling import profile_spec
from orchestrator.sweeps.cpu_tiny import SPEC as CPU_TINY
from orchestrator.sweeps.large_dram import SPEC as LARGE_DRAM
from orchestrator.workload.plan import build_plan
from orchestrator.workload.spec import WorkloadSpec

# The pressure benchmark's profile of this machine, rounded: any fixed profile pins the key's form.
PROFILE = CpuProfile(peak_flops=15.8e9, memory_bytes_s=17.7e9, step_overhead_s=0.00443, seq_overhead_s=0.000473,
                     request_overhead_s=0.057, max_num_batched_tokens=2048, num_kv_blocks=2399,
                     block_size=32)  # fmt: skip

# Computed on 2026-11-23. The same derivation finds the profiling cells of the pressure benchmark stored the
# day before (benchmarks/sim_vs_cpu.py), so results already on disk keep their keys. The cpu_tiny keys were computed
# again on 2026-11-28, when its pool went from 2,400 to 1,200 blocks so that its pressure load is under pressure on
# any machine (the sweep's cells are new cells: a re-run of cpu_tiny measures them afresh). A simulated GPU cell's key
# names its engine stack unless it is the source study's, whose cells keep the keys they had before stacks; the
# default stack became vllm-0.26 on 2026-11-28, so a simulated sweep's cells on it are new cells (other numbers).
PINNED_KEYS = {
    "simulated H200 cell of large_dram": "87283a433613a5ed",
    "simulated H200 cell of large_dram, source-study stack": "590bec1fe52c1c87",
    "CPU-engine cell of cpu_tiny": "1a6f07a7274b5453",
    "CPU profiling cell of cpu_tiny": "dab2984dd4e8ae85",
    "simulated CPU cell from a profile": "c60bacaa5da64e94",
}
PINNED_TRAFFIC = "e7aad773c66201ade66e54ed0994c93b2411624ff9448537b9177b930fd11a66"  # 27 jobs


def first_cells() -> dict[str, str]:
    simulated_cpu = CPU_TINY.model_copy(update={"engine": EngineKind.SIM, "cpu_profile": PROFILE})
    return {
        "simulated H200 cell of large_dram": expand(LARGE_DRAM.model_copy(update={"engine": EngineKind.SIM}))[0].key,
        "simulated H200 cell of large_dram, source-study stack": expand(LARGE_DRAM.model_copy(
            update={"engine": EngineKind.SIM, "sim_stack": SOURCE_STUDY}))[0].key,
        "CPU-engine cell of cpu_tiny": expand(CPU_TINY)[0].key,
        "CPU profiling cell of cpu_tiny": expand(profile_spec(CPU_TINY))[0].key,
        "simulated CPU cell from a profile": expand(simulated_cpu)[0].key,
    }


def test_the_keys_of_done_cells_stay_what_they_were():
    assert first_cells() == PINNED_KEYS


def test_the_source_studys_traffic_stays_byte_identical(tiny_counter):
    # Scale 1.0, seed 42: the source study's prompts and arrivals, sized by the tiny model's tokenizer.
    plan = build_plan(WorkloadSpec(jps=2, duration_s=10, seed=42), tiny_counter)
    assert plan.fingerprint() == PINNED_TRAFFIC
