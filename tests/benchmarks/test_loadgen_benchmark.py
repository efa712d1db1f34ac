"""The load-generator benchmark runs from the checkout and ends with its JSON line (figures are its job)."""

import json
import subprocess
import sys

from orchestrator.paths import PROJECT_ROOT


def test_the_benchmark_prints_one_final_json_line_with_a_point_per_load():
    """The script whole, as a user runs it: it starts its own fake engines, since it measures lag from the
    arrivals a server records. One load point: a second runs the same code again."""
    command = [sys.executable, str(PROJECT_ROOT / "benchmarks" / "loadgen.py"), "--jps", "2", "--duration-s", "2",
               "--scale", "0.1"]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    assert [point["jps"] for point in figures["points"]] == [2]
    for point in figures["points"]:
        assert point["lost_requests"] == point["failed_requests"] == 0 and point["requests"] > 0
        assert {"target_rate", "achieved_rate", "p50_lag_ms", "p99_lag_ms", "max_lag_ms", "cpu_ms_per_request"} <= set(point)
        assert 0 <= point["p50_lag_ms"] <= point["p99_lag_ms"] <= point["max_lag_ms"]
        # vLLM's own client replayed the same request times against its own fresh fake engine
        assert point["vllm_bench"]["completed"] == point["requests"] and point["vllm_bench"]["lost_requests"] == 0
