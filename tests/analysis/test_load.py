import pandas as pd

from analysis.load import load_sweep
from orchestrator.records.store import atomic_write_parquet


def test_a_measured_cell_replaces_the_simulated_one_of_the_same_grid_point_in_the_report(tmp_path):
    rows = [
        {"sweep": "s", "cell_key": "sim-h200", "engine": "sim", "gpu": "H200", "policy": "fcfs", "jps": 1.0, "dram_gb": 400.0, "seed": 42, "status": "done"},
        {"sweep": "s", "cell_key": "real-h200", "engine": "vllm", "gpu": "H200", "policy": "fcfs", "jps": 1.0, "dram_gb": 400.0, "seed": 42, "status": "done"},
        {"sweep": "s", "cell_key": "sim-l40s", "engine": "sim", "gpu": "L40S", "policy": "fcfs", "jps": 1.0, "dram_gb": 100.0, "seed": 42, "status": "done"},
        {"sweep": "s", "cell_key": "real-l40s", "engine": "vllm", "gpu": "L40S", "policy": "fcfs", "jps": 1.0, "dram_gb": 100.0, "seed": 42, "status": "failed"},
    ]  # fmt: skip
    atomic_write_parquet(pd.DataFrame(rows), tmp_path / "summary.parquet")
    assert sorted(load_sweep(tmp_path).summary.cell_key) == ["real-h200", "real-l40s", "sim-l40s"]
