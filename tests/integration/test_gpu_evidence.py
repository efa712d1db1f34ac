"""The GPU machine's evidence run rehearsed on the real CPU engine, as that machine runs it: no Ray, no MLflow, a
Llama-3.1-8B-shaped model (at a small size) with dummy weights, every stage, one server start.

``make gpu-rehearsal`` runs the whole command by hand (every policy, the four source-study cells); here the cells
stage runs fcfs (and lmcache, which needs CUDA: its stage builds the GPU command line), the profile reads fcfs's
trace, and the one source-study cell is fcfs again, on the replica the cells stage left (a reset proven, no start).
"""

from __future__ import annotations

import json
import tarfile

import pytest

from orchestrator.evidence.pack import ARCHIVE_FILE, EVIDENCE_FILE, PACKED_FILES
from tests.dummy_cells import assert_measures_its_plan_and_hits_each_previous_turn, run_as_on_a_gpu_box, small_model

pytestmark = pytest.mark.engine


def test_the_rehearsal_runs_every_stage_and_packs_its_evidence_into_three_files(tmp_path):
    model = small_model("llama-3.1-8b-instruct", tmp_path / "llama-small")
    out, work = tmp_path / "out", tmp_path / "work"
    args = ["--gpu", "cpu", "--out", str(out), "--work", str(work), "--budget-s", "900", "--model", str(model),
            "--weights", "dummy", "--kv-blocks", "auto", "--policies", "fcfs,lmcache", "--duration-s", "3",
            "--source-cells", "fcfs:2", "--source-duration-s", "3"]  # fmt: skip
    run_as_on_a_gpu_box("orchestrator.gpu_evidence", args, tmp_path, timeout_s=900)

    assert sorted(path.name for path in out.iterdir()) == sorted(PACKED_FILES)
    stages = {stage["name"]: stage for stage in json.loads((out / EVIDENCE_FILE).read_text())["stages"]}
    assert {name: stage["status"] for name, stage in stages.items()} == {
        "doctor": "done", "cell fcfs": "done", "cell lmcache": "skipped", "profile": "done", "source fcfs 2 JPS": "done"}
    doctor = stages["doctor"]["table"]
    assert "vllm.entrypoints.openai.api_server imported" in doctor
    assert "weights readable  ok      dummy weights of " in doctor
    fcfs = stages["cell fcfs"]["facts"]
    assert fcfs["settings"] == "eager" and fcfs["start"]["total"] > fcfs["start"]["process, imports, API"] > 0
    assert "LMCacheConnectorV1" in stages["cell lmcache"]["facts"]["server_command"]
    assert stages["profile"]["detail"].endswith("(cpu has no rates to replace)")
    assert_measures_its_plan_and_hits_each_previous_turn(work / "cells" / "fcfs", model)
    source = json.loads((work / "source-study" / "fcfs-2jps" / "cell.json").read_text())
    assert source["replica_reused"] and source["reset_proof"]["cached_after"] == 0

    with tarfile.open(out / ARCHIVE_FILE) as archive:
        packed = set(archive.getnames())
    assert {f"evidence/cells/fcfs/{name}" for name in ("cell.json", "requests.parquet", "scheduler_trace.parquet",
                                                       "replica.log")} <= packed  # fmt: skip
