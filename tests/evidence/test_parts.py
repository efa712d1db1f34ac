"""The evidence run's pure parts: the budget's plan and the pack."""

from __future__ import annotations

import json
import tarfile

import pytest

from orchestrator.budget.cost import CostModel
from orchestrator.evidence.budget import Budget
from orchestrator.evidence.pack import ARCHIVE_FILE, PACKED_FILES, EvidenceHeader, StageResult, pack, without_cell_lines
from orchestrator.workload.spec import WorkloadSpec


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_stage_starts_only_when_its_estimate_fits_and_each_start_is_estimated_from_the_latest():
    clock = Clock()
    budget = Budget(300.0, "H200", clock=clock)
    workload = WorkloadSpec(jps=1, duration_s=10)  # 8 turns with 0.5 s tool calls
    first = CostModel().shipped("H200").first_s  # the measured first start the project ships
    assert budget.cell_estimate_s(workload, needs_start=True) == pytest.approx(first + 10 + 8 * 1.5 + 10)
    assert budget.refusal(272.0) is None
    clock.now += 100
    assert budget.refusal(272.0) == "needs about 272 s, 200 s of the 300 s budget left"
    budget.record_start(120.0)  # the first start compiled the model
    budget.record_start(50.0)  # the next loaded the compiled graphs
    assert budget.cell_estimate_s(workload, needs_start=True) == pytest.approx(50 * 1.2 + 32)
    assert budget.cell_estimate_s(workload, needs_start=False) == 32
    clock.now += 500
    assert budget.refusal(1.0) == "needs about 1 s, 0 s of the 300 s budget left"
    told = Budget(300.0, "H200", first_start_s=95.0, clock=clock)  # a previous call measured the machine's start
    assert told.cell_estimate_s(workload, needs_start=True) == 95 + 32


def test_the_pack_is_three_whole_files_holding_every_stage_file(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "cells" / "fcfs").mkdir(parents=True)
    (work / "cells" / "fcfs" / "cell.json").write_text("{}")
    header = EvidenceHeader("python -m orchestrator.cli.evidence --gpu H200", "H200", "NVIDIA H200", "vllm 0.26.0", 500)
    stages = [StageResult("doctor", "done", 12.5, "6 checks hold", "target  check ..."),
              StageResult("cell fcfs", "skipped", 0.0, "needs about 272 s, 200 s of the 500 s budget left")]
    pack(work, out, header, stages[:1])
    pack(work, out, header, stages)  # after every stage: the files are replaced, never added to
    assert sorted(path.name for path in out.iterdir()) == sorted(PACKED_FILES)
    evidence = json.loads((out / "evidence.json").read_text())
    assert [(s["name"], s["status"]) for s in evidence["stages"]] == [("doctor", "done"), ("cell fcfs", "skipped")]
    summary = (out / "summary.md").read_text()
    assert "cell fcfs  skipped     0.0  needs about 272 s" in summary and "## doctor: done" in summary
    with tarfile.open(out / ARCHIVE_FILE) as archive:
        names = set(archive.getnames())
    assert {"evidence/cells/fcfs/cell.json", "evidence/summary.md", "evidence/evidence.json"} <= names


def test_a_replicas_log_leaves_its_cells_lines_to_the_cells_own_log_and_keeps_the_rest():
    start, cell, reset = "INFO starting\nINFO Starting vLLM server\n", "LMCache INFO: Stored 256\n" * 3, "INFO reset\n"
    assert without_cell_lines(start + cell + reset, cell) == start + "[3 lines of this cell: its server.log]\n" + reset
    assert without_cell_lines(start + reset, cell) == start + reset  # lines it does not hold: the log as it is
    assert without_cell_lines(start + reset, "") == start + reset  # a cell that logged nothing
