"""Dummy weights on the real CPU engine, through ``run_cell`` with Ray and MLflow made unimportable: models of
the shipped architectures at a small size (the real vocabulary, so the real-size output head samples among
128K ids), the source study's workload at small scale.

With no memory pressure every prompt measures its planned length and every turn from the second on hits the
whole previous turn in the prefix cache: its prompt and answer, floored to whole blocks, less the answer's
last token, whose KV vLLM never computes (it is sampled, not fed back). And the KV pool vLLM sizes from its
memory is the sizing library's prediction.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from orchestrator.models.catalog import shipped_config
from orchestrator.paths import PROJECT_ROOT
from orchestrator.records.layout import CellFiles
from orchestrator.sizing.kv import kv_bytes_per_token, kv_tokens
from orchestrator.sizing.models import load_model
from orchestrator.units import GIB

pytestmark = pytest.mark.engine

SMALL = {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
         "num_key_value_heads": 2}
# Qwen3's heads are wider than hidden / heads: the sizing must read head_dim, as vLLM does.
ARCHITECTURES = {"llama-3.1-8b-instruct": SMALL | {"head_dim": 64}, "qwen3-8b": SMALL | {"head_dim": 128}}
CPU_POOL_GIB = 1.0  # what a CPU replica gets when vLLM sizes the pool (``replica.vllm_server``)

BLOCK_RAY_AND_MLFLOW = """
import importlib.abc, sys

class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("ray", "mlflow"):
            raise ImportError(f"{name} is not installed on this GPU box (the test's stand-in)")
        return None

sys.meta_path.insert(0, _Absent())
"""


@pytest.fixture(scope="module")
def without_ray_and_mlflow(tmp_path_factory):
    """An environment whose Python cannot import Ray or MLflow, as on a single GPU box with neither."""
    site = tmp_path_factory.mktemp("no-ray")
    (site / "sitecustomize.py").write_text(BLOCK_RAY_AND_MLFLOW)
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{PROJECT_ROOT}", "RAY_ADDRESS": ""}
    probe = subprocess.run([sys.executable, "-c", "import ray"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "not installed on this GPU box" in probe.stderr
    return env


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_a_dummy_model_measures_its_planned_prompts_and_hits_each_previous_turn(name, without_ray_and_mlflow, tmp_path):
    config = shipped_config(name) | ARCHITECTURES[name]
    config.pop("num_parameters", None)
    model = tmp_path / f"{name}-small"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    out = tmp_path / "cell"
    command = [sys.executable, "-m", "orchestrator.run_cell", "--model", str(model), "--weights", "dummy",
               "--policy", "fcfs", "--kv-blocks", "auto", "--scale", "0.25", "--jps", "1", "--duration-s", "3",
               "--out", str(out)]  # fmt: skip
    result = subprocess.run(command, env=without_ray_and_mlflow, cwd=PROJECT_ROOT, capture_output=True, text=True,
                            timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (readable,) = [line.split() for line in result.stdout.splitlines() if line.startswith("cpu     weights readable")]
    assert readable[3:6] == ["ok", "dummy", "weights"] and "weights=dummy" in result.stdout

    files = CellFiles(out)
    cell = json.loads(files.config.read_text())
    assert cell["cell"]["weights"] == "dummy" and "--load-format" in cell["server_argv"]
    requests = pd.read_parquet(files.requests).sort_values(["job_id", "turn"])
    assert len(requests) >= 16 and (requests.status == "ok").all()
    assert (requests.prompt_tokens == requests.target_prompt_tokens).all()
    block = cell["engine_facts"]["block_size"]
    previous = requests.groupby("job_id")[["prompt_tokens", "completion_tokens"]].shift()
    best = (previous.prompt_tokens + previous.completion_tokens - 1) // block * block
    later = requests.turn >= 2
    assert (requests.cached_tokens[later] >= best[later]).all()
    # From the third turn on a job's own prefix is longer than anything jobs share (the system prompt and the
    # first answer, identical for every job under greedy decoding), so the hit is exactly the best.
    own = requests.turn >= 3
    assert (requests.cached_tokens[own] == best[own]).all(), requests[own & (requests.cached_tokens != best)]

    per_token = kv_bytes_per_token(load_model(str(model)), 2)
    predicted = kv_tokens(CPU_POOL_GIB * GIB, per_token, block) // block
    reported = cell["engine_facts"]["num_kv_blocks"]
    assert abs(reported / predicted - 1) <= 0.02, (reported, predicted)
