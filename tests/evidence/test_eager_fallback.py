"""On a GPU, a compiled start that fails (torch.compile or CUDA-graph capture) must not cost every cell after it:
the cell runs again eager, every later cell runs eager, and each says why. Only a GPU starts compiled, so the
worker here is a stand-in that fails starts as a GPU node would; the plan is the real one for an H200."""

from __future__ import annotations

import time

from orchestrator.cli.evidence import parser, plan_from
from orchestrator.evidence.budget import Budget
from orchestrator.evidence.run import EvidenceRun
from orchestrator.records.cell import CellOutcome, FailureKind
from orchestrator.replica.replica import ResetError


class FailingStarts:
    """A stand-in cell worker whose every server start fails, saying whether it was asked to start compiled."""

    def __init__(self):
        self.started: list[tuple[str, bool | None]] = []

    def run(self, cell, limits) -> CellOutcome:
        eager = cell.engine_options.enforce_eager
        self.started.append((cell.policy, eager))
        why = "eager start failed too" if eager else "Inductor compilation failed"
        return CellOutcome.failure(cell, FailureKind.REPLICA_START, "replica did not start: server exited with code 1",
                                   retryable=True,
                                   node_id="", started_unix=time.time(), server_log=f"RuntimeError: {why}\n")  # fmt: skip

    def prove_reset(self):
        raise ResetError("no replica is running to reset")

    def replica_log(self) -> str:
        return ""

    def keeps_replica_for(self, cell) -> bool:
        return False

    def shutdown(self) -> None:
        pass


def test_after_a_failed_compiled_start_the_cell_and_every_later_one_run_eager_and_say_why(tmp_path):
    args = parser().parse_args(["--gpu", "H200", "--out", str(tmp_path / "out"), "--budget-s", "3600", "--stages",
                                "cells", "--policies", "fcfs,continuum"])  # fmt: skip
    worker = FailingStarts()
    run = EvidenceRun(plan_from(args), Budget(3600, "H200"), tmp_path / "work", tmp_path / "out", "the test",
                      worker=worker)  # fmt: skip
    stages = run.run()

    assert worker.started == [("fcfs", None), ("fcfs", True), ("continuum", True)]
    assert [stage.status for stage in stages] == ["failed", "failed"]
    assert stages[0].detail == ("failed: replica did not start: server exited with code 1; server log ends: "
                                "RuntimeError: eager start failed too")  # fmt: skip
    why = ("settings: eager (the fcfs cell's compiled start failed: failed: replica did not start: server exited with "
           "code 1; server log ends: RuntimeError: Inductor compilation failed)")  # fmt: skip
    assert all(why in stage.table for stage in stages)
    assert (tmp_path / "work" / "cells" / "fcfs-compiled" / "server.log").read_text().startswith("RuntimeError: Inductor")
