"""A real CPU cell of a shipped architecture at a small size with dummy weights, run as on a single GPU box (no
Ray, no MLflow), and what its records must show: every prompt measures its planned length, every turn from the
second on hits the whole previous turn in the prefix cache, and the KV pool vLLM sizes is the sizing library's.
``test_dummy_weights`` runs ``kvsweep cell`` so; ``test_gpu_evidence`` the GPU evidence run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from orchestrator.models.arch import load_model
from orchestrator.models.catalog import shipped_config
from orchestrator.paths import PROJECT_ROOT
from orchestrator.records.layout import CellFiles
from orchestrator.sizing.kv import kv_bytes_per_token, kv_tokens
from orchestrator.units import GIB

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


def env_without_ray_and_mlflow(site: Path) -> dict[str, str]:
    """An environment whose Python cannot import Ray or MLflow, as on a single GPU box with neither (``site``: a
    folder for its sitecustomize)."""
    (site / "sitecustomize.py").write_text(BLOCK_RAY_AND_MLFLOW)
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{PROJECT_ROOT}", "RAY_ADDRESS": ""}
    probe = subprocess.run([sys.executable, "-c", "import ray"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "not installed on this GPU box" in probe.stderr
    return env


def run_as_on_a_gpu_box(module: str, args: list[str], site: Path, timeout_s: float) -> subprocess.CompletedProcess:
    """``python -m module args`` from the project root where Ray and MLflow cannot be imported; it must succeed."""
    result = subprocess.run([sys.executable, "-m", module, *args], env=env_without_ray_and_mlflow(site),
                            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=timeout_s)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def small_model(name: str, directory: Path) -> Path:
    """``name``'s shipped config at the small size of ``ARCHITECTURES``, in ``directory``."""
    config = shipped_config(name) | ARCHITECTURES[name]
    config.pop("num_parameters", None)
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def assert_measures_its_plan_and_hits_each_previous_turn(cell_dir: Path, model: Path) -> None:
    files = CellFiles(cell_dir)
    cell = json.loads(files.config.read_text())
    assert cell["cell"]["weights"] == "dummy" and "--load-format" in cell["server_argv"]
    requests = pd.read_parquet(files.requests).sort_values(["job_id", "turn"])
    assert len(requests) >= 16 and (requests.status == "ok").all()
    assert (requests.prompt_tokens == requests.target_prompt_tokens).all()
    block = cell["engine_facts"]["block_size"]
    previous = requests.groupby("job_id")[["prompt_tokens", "completion_tokens"]].shift()
    # The previous turn's prompt and answer, floored to whole blocks, less the answer's last token, whose KV vLLM
    # never computes (it is sampled, not fed back).
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
