import pandas as pd

from orchestrator.analysis.load import load_sweep
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


def test_the_provenance_says_where_dummy_weights_ran(tmp_path):
    base = {"sweep": "s", "engine": "vllm", "gpu": "H100", "policy": "fcfs", "dram_gb": 0.0, "seed": 42,
            "status": "done", "device_name": "NVIDIA H100 80GB HBM3"}  # fmt: skip
    rows = [base | {"cell_key": "a", "jps": 1.0, "weights": "dummy"},
            base | {"cell_key": "b", "jps": 3.0, "weights": "real"}]
    atomic_write_parquet(pd.DataFrame(rows), tmp_path / "summary.parquet")
    data = load_sweep(tmp_path)
    assert data.provenance(data.done.iloc[:1]) == (
        "measured on real vLLM (NVIDIA H100 80GB HBM3); dummy weights (random weights of the model's exact shapes, "
        "fixed-length answers)")  # fmt: skip
    assert data.provenance().endswith("; some cells with dummy weights (random weights of the model's exact shapes, "
                                      "fixed-length answers)")  # fmt: skip
    assert "dummy" not in data.provenance(data.done.iloc[1:])
