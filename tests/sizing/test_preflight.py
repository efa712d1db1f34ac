from collections import Counter

from orchestrator.sizing.kv import Regime
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.planning.preflight import preflight, regime_table
from orchestrator.sweeps.large_dram import SPEC as LARGE_DRAM


def cells(policy: str, gpu: str):
    return {cell.jps: cell for cell in expand(LARGE_DRAM) if cell.policy == policy and cell.gpu == gpu}


def test_low_load_fits_on_an_h200_so_an_offload_tier_is_flagged_as_a_no_op():
    check = preflight(cells("lmcache", "H200")[1])
    assert check.regime is Regime.FITS_ON_GPU and check.warn and "CPU tier" in check.note
    assert not preflight(cells("fcfs", "H200")[1]).warn  # nothing to offload, nothing to warn about


def test_a_policys_cpu_tier_is_sized_as_its_own_rule_says_not_as_the_dram_budget():
    lmcache = cells("lmcache", "H200")[6]
    nocache = lmcache.model_copy(update={"policy": "lmcache-nocache"})  # the ablation's 1 GiB tier, whatever the budget
    tier_of = {cell.policy: preflight(cell).note.split("CPU tier ")[1] for cell in (lmcache, nocache)}
    assert tier_of == {"lmcache": "3,277K tokens", "lmcache-nocache": "8K tokens"}


def test_more_load_or_a_smaller_gpu_moves_a_cell_toward_queueing():
    order = [Regime.FITS_ON_GPU, Regime.OFFLOAD_WINDOW, Regime.QUEUEING]
    h200 = [order.index(preflight(cell).regime) for _, cell in sorted(cells("fcfs", "H200").items())]
    assert h200 == sorted(h200) and h200[-1] == 2
    assert preflight(cells("fcfs", "L40S")[15]).regime is Regime.QUEUEING


def test_a_cell_of_several_replicas_is_sized_per_replica_with_its_share_of_the_jobs():
    one = cells("fcfs", "L40S")[3]
    eight = one.model_copy(update={"replicas": 8, "router": "round-robin"})
    assert preflight(one).regime is Regime.QUEUEING and preflight(eight).regime is not Regime.QUEUEING
    assert "per replica" in preflight(eight).note and "per replica" not in preflight(one).note


def test_the_regime_table_counts_the_cells_of_each_regime_and_the_idle_cpu_tiers():
    checks = [preflight(cell) for cell in expand(LARGE_DRAM)]
    lines = regime_table(checks)
    counted = {line.split()[0]: int(line.split()[1]) for line in lines}
    assert counted == Counter(check.regime.value for check in checks) and sum(counted.values()) == 60
    idle = sum(check.warn for check in checks if check.regime is Regime.FITS_ON_GPU)
    assert idle and f"({idle} with a CPU tier that cannot matter)" in next(line for line in lines if "fits-on-gpu" in line)


def test_the_cpu_device_gets_no_roofline_estimate_rather_than_a_wrong_one():
    from orchestrator.sweeps.cpu_tiny import SPEC as CPU_TINY

    check = preflight(expand(CPU_TINY)[0])
    assert check.regime is None and "no estimate for the cpu device" in check.note


def test_dry_run_of_large_dram_shows_every_cells_regime(ray_cluster, tmp_path):
    """The script as a user runs it: a dry run plans on a connected cluster (the shared one: it runs nothing)."""
    import subprocess
    import sys

    from orchestrator.paths import PROJECT_ROOT

    command = [sys.executable, str(PROJECT_ROOT / "sweeps" / "large_dram.py"), "--dry-run", "--results-dir", str(tmp_path),
               "--ray-address", ray_cluster.address]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, timeout=180, check=True).stdout
    regimes = [line.split("preflight: ")[1].split(":")[0] for line in out.splitlines() if "preflight: " in line]
    assert len(regimes) == 60 and set(regimes) <= {regime.value for regime in Regime}
    assert {"fits-on-gpu", "queueing"} <= set(regimes)
    table = out[out.index("preflight of the 60 cells, by regime:"):].splitlines()[1:]
    counted = {line.split()[0]: int(line.split()[1]) for line in table}
    assert counted == {regime: regimes.count(regime) for regime in set(regimes)}
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing


def test_a_tensor_parallel_cell_is_sized_as_its_ranks_together_and_says_what_each_holds():
    cell = cells("lmcache", "H100")[3].model_copy(update={"model": "llama-3.1-70b", "tp": 4})
    note = preflight(cell).note
    assert "each of the 4 ranks: weights 35.3 GB, KV 32.8 GiB (80 KiB per token: its share of the heads of all " in note
    assert note.endswith(", CPU tier 100.0 GiB")  # the replica's 400 GiB budget over its four ranks
    assert "ranks" not in preflight(cells("lmcache", "H100")[3]).note
