"""The GPU machine's evidence run rehearsed on the real CPU engine, as that machine runs it: no Ray, no MLflow, a
Llama-3.1-8B-shaped model (at a small size) with dummy weights, every stage, one server start.

``make gpu-rehearsal`` runs the GPU machine's command by hand (the pressure plan); here the cells stage runs fcfs (and
lmcache, which needs CUDA: its stage builds the GPU command line), the profile reads fcfs's trace, the one
source-study cell is fcfs again, and the pressure stage's fcfs cell too, both on the replica the cells stage left (a
reset proven, no start), its native-offload cell built as the H100 runs it.
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
            "--source-cells", "fcfs:2", "--source-duration-s", "3", "--pressure-policies", "fcfs,native-offload",
            "--stages", "doctor,cells,profile,source-study,pressure"]  # fmt: skip
    run_as_on_a_gpu_box("orchestrator.cli.evidence", args, tmp_path, timeout_s=900)

    assert sorted(path.name for path in out.iterdir()) == sorted(PACKED_FILES)
    stages = {stage["name"]: stage for stage in json.loads((out / EVIDENCE_FILE).read_text())["stages"]}
    assert {name: stage["status"] for name, stage in stages.items()} == {
        "doctor": "done", "cell fcfs": "done", "cell lmcache": "skipped", "profile": "done", "source fcfs 2 JPS": "done",
        "pressure plan": "done", "pressure fcfs": "done", "pressure native-offload": "skipped"}
    doctor = stages["doctor"]["table"]
    assert "vllm.entrypoints.openai.api_server imported" in doctor
    assert "weights readable  ok      dummy weights of " in doctor
    # Its servers start from the run itself, at its niceness (a niced run's doctor fails: the row says how to mend it).
    assert "CPU priority      ok      servers and clients start at nice 0" in doctor
    fcfs = stages["cell fcfs"]["facts"]
    assert fcfs["settings"] == "eager" and fcfs["start"]["total"] > fcfs["start"]["process, imports, API"] > 0
    assert "LMCacheConnectorV1" in stages["cell lmcache"]["facts"]["server_command"]
    assert stages["profile"]["detail"].endswith("(cpu has no rates to replace)")
    assert_measures_its_plan_and_hits_each_previous_turn(work / "cells" / "fcfs", model)
    assert "Starting vLLM server" in (work / "cells" / "fcfs" / "replica.log").read_text()  # the start is kept
    source = json.loads((work / "source-study" / "fcfs-2jps" / "cell.json").read_text())
    assert source["replica_reused"] and source["reset_proof"]["cached_after"] == 0
    pressure = json.loads((work / "pressure" / "fcfs" / "cell.json").read_text())
    assert pressure["replica_reused"] and pressure["reset_proof"]["cached_after"] == 0
    measured = stages["pressure fcfs"]["facts"]["measured"]
    assert measured["completed"] == measured["jobs"] > 0 and 0 < measured["gpu_hit_tokens"] < measured["prompt_tokens"]
    assert stages["pressure fcfs"]["facts"]["predicted"] is None  # no roofline for cpu: nothing to predict
    native = stages["pressure native-offload"]["facts"]["server_command"]
    assert "--num-gpu-blocks-override 3000" in native and "--kv-offloading-size 32" in native

    with tarfile.open(out / ARCHIVE_FILE) as archive:
        packed = set(archive.getnames())
    assert {f"evidence/cells/fcfs/{name}" for name in ("cell.json", "requests.parquet", "scheduler_trace.parquet",
                                                       "replica.log")} <= packed  # fmt: skip
