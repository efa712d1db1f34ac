"""Dummy weights on the real CPU engine, through ``kvsweep cell`` with Ray and MLflow made unimportable: a Qwen3-shaped
model at a small size (the real vocabulary, so the real-size output head samples among 151K ids), the source
study's workload at small scale. The Llama-shaped one runs through the GPU evidence run's rehearsal
(``test_gpu_evidence``), which starts its cell the same way.

With no memory pressure every prompt measures its planned length and every turn from the second on hits the
whole previous turn in the prefix cache, and the KV pool vLLM sizes from its memory is the sizing library's
prediction (``tests/dummy_cells.py``). The node's checks with dummy weights run in the rehearsal; this cell skips
them (``--no-checks``).
"""

from __future__ import annotations

import pytest

from tests.dummy_cells import assert_measures_its_plan_and_hits_each_previous_turn, run_as_on_a_gpu_box, small_model

pytestmark = pytest.mark.engine


def test_a_dummy_qwen3_measures_its_planned_prompts_and_hits_each_previous_turn(tmp_path):
    model = small_model("qwen3-8b", tmp_path / "qwen3-8b-small")
    out = tmp_path / "cell"
    args = ["--model", str(model), "--weights", "dummy", "--policy", "fcfs", "--kv-blocks", "auto", "--scale", "0.25",
            "--jps", "1", "--duration-s", "3", "--no-checks", "--out", str(out)]  # fmt: skip
    result = run_as_on_a_gpu_box("orchestrator.cli.cell", args, tmp_path, timeout_s=600)
    assert "weights=dummy" in result.stdout
    assert_measures_its_plan_and_hits_each_previous_turn(out, model)
