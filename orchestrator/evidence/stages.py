"""The evidence run's stages as its time budget admits them: each timed, recorded and printed, and the evidence packed
after each (``evidence.pack``), so that a run cut at its limit keeps every stage that finished."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from orchestrator.evidence.budget import Budget
from orchestrator.evidence.checks import Check, format_table
from orchestrator.evidence.pack import EvidenceHeader, StageResult, pack
from orchestrator.inputs.validation import first_line


class Cut(BaseException):
    """SIGTERM arrived: the command's time limit is ending it. Not an ``Exception``, so that no handler on the
    way (a reset proof's, a stage's) takes it for a failure of its own."""


class StageLog:
    """The stages of one run so far, and the run's header, packed into ``out`` after every stage."""

    def __init__(self, budget: Budget, work: Path, out: Path, header: EvidenceHeader):
        self.budget, self.work, self.out, self.header = budget, work, out, header
        self.stages: list[StageResult] = []

    def stage(self, name: str, estimate_s: float, body: Callable[[], StageResult]) -> StageResult:
        """Run ``body`` if ``estimate_s`` fits in the budget, record its result (or why it was skipped, failed
        or cut), print it and pack."""
        if (refusal := self.budget.refusal(estimate_s)) is not None:
            return self.record(StageResult(name, "skipped", 0.0, refusal))
        print(f"[{self.budget.total_s - self.budget.left_s():6.0f} s] {name} ...", flush=True)
        started = time.monotonic()
        try:
            result = body()
        except Cut:
            result = StageResult(name, "cut", 0.0, "SIGTERM: the command's time limit ended the run inside this stage")
            self.record(_timed(result, started))
            raise
        except Exception as error:  # a stage's failure is evidence too; the next stage may still run
            result = StageResult(name, "failed", 0.0, f"{type(error).__name__}: {first_line(error)}")
        return self.record(_timed(result, started))

    def record(self, result: StageResult) -> StageResult:
        self.stages.append(result)
        print(f"  {result.name}: {result.status} in {result.seconds:.1f} s: {result.detail}", flush=True)
        if result.table:
            print("    " + result.table.replace("\n", "\n    "), flush=True)
        pack(self.work, self.out, self.header, self.stages)
        return result


def from_checks(name: str, checks: list[Check], what: str, directory: Path) -> StageResult:
    """A stage of ``checks``, their table written into ``directory``: failed where one failed."""
    directory.mkdir(parents=True, exist_ok=True)
    table = format_table(checks)
    (directory / "checks.txt").write_text(table + "\n")
    failed = [check for check in checks if check.ok is False]
    detail = f"{failed[0].name}: {failed[0].detail}" if failed else f"{len(checks)} checks: {what} hold"
    return StageResult(name, "failed" if failed else "done", 0.0, detail, table,
                       {"checks": [asdict(check) for check in checks]})  # fmt: skip


def _timed(result: StageResult, started: float) -> StageResult:
    return replace(result, seconds=time.monotonic() - started)
