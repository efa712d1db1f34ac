"""How the evidence run measures a cell: on one cell worker (a replica kept between cells that can share it), with
its evidence (``checks.checked_cell``), its files kept as a sweep keeps them, its server's start recorded for the
budget, and eager from the first failed compiled start on: one failed torch.compile or CUDA-graph capture must not
cost every cell after it."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Protocol

from orchestrator.cell.spec import CellSpec
from orchestrator.evidence.budget import Budget
from orchestrator.evidence.checks import Check, checked_cell, format_table
from orchestrator.evidence.pack import StageResult, seconds, without_cell_lines
from orchestrator.evidence.pressure import CellFacts, cell_facts, simulated
from orchestrator.records.cell import CellOutcome, FailureKind, ReplicaStart
from orchestrator.records.layout import CellFiles
from orchestrator.records.slo import Slo
from orchestrator.records.summary import CellSummary, summarize
from orchestrator.sweep.planning.spec import RunLimits
from orchestrator.sweep.runtime.results import write_attempt_files


class CellRunner(Protocol):
    """What the bench asks of the cell worker it runs cells on (``sweep.runtime.worker.CellWorker``)."""

    def run(self, cell: CellSpec, limits: RunLimits) -> CellOutcome: ...
    def prove_reset(self) -> object: ...
    def replica_log(self) -> str: ...
    def keeps_replica_for(self, cell: CellSpec) -> bool: ...
    def shutdown(self) -> None: ...


class CellBench:
    """Runs the evidence's cells on ``worker``; ``measured_jct_s`` holds each one's mean JCT by its folder
    (``<stage>/<cell>``) for the held-out predictions."""

    def __init__(self, worker: CellRunner, budget: Budget, on_gpu: bool):
        self.worker, self.budget, self.on_gpu = worker, budget, on_gpu
        self.measured_jct_s: dict[str, float | None] = {}
        # Set when a compiled start failed on the GPU: every later cell runs eager, and says so.
        self.eager_because: str | None = None

    def checked(self, name: str, cell: CellSpec, directory: Path) -> tuple[StageResult, CellOutcome]:
        """``cell`` run with its evidence, its files in ``directory``, its server's start split where it started
        one; eager from then on if a compiled start failed."""
        ran = self.settled(cell)
        outcome, checks = self._run_checked(ran)
        if self.on_gpu and self.eager_because is None and outcome.failure_kind is FailureKind.REPLICA_START:
            self.eager_because = f"the {cell.policy} cell's compiled start failed: {why_not_done(outcome)}"
            self.save(directory.with_name(f"{directory.name}-compiled"), outcome)
            ran = self.settled(cell)
            outcome, checks = self._run_checked(ran)
        summary = self.save(directory, outcome)
        settings = "eager" if ran.engine_setup.enforce_eager else "torch.compile and CUDA graphs"
        if ran.engine_options.max_num_seqs is not None:
            settings += f", max_num_seqs {ran.engine_options.max_num_seqs}"
        facts: dict = {"policy": cell.policy, "settings": settings, "checks": [asdict(check) for check in checks],
                       "jct_mean_s": summary.jct_mean_s if summary else None}  # fmt: skip
        table = format_table(checks)
        if (start := outcome.config.replica_start) is not None:
            facts["start"] = start.phases | {"forked": start.forked, "compile cache": start.compile_cache}
            table += "\nstart: " + ", ".join(f"{phase} {seconds(value)}" for phase, value in start.phases.items())
            table += f"; {_start_kind(start)}"
        table += f"\nsettings: {settings}" + (f" ({self.eager_because})" if self.eager_because else "")
        failed = [check for check in checks if check.ok is False]
        status = "failed" if failed or summary is None else "done"
        if summary is None:
            detail = why_not_done(outcome)
        else:
            detail = f"{failed[0].name}: {failed[0].detail}" if failed else _cell_line(outcome, summary)
        return StageResult(name, status, 0.0, detail, table, facts), outcome

    def measured(self, cell: CellSpec, directory: Path,
                 slo: Slo | None = None) -> tuple[CellOutcome, CellSummary | None]:  # fmt: skip
        """``cell`` run on the kept or a new replica and saved in ``directory``, judged against ``slo``."""
        outcome = self._run(self.settled(cell))
        return outcome, self.save(directory, outcome, slo)

    def save(self, directory: Path, outcome: CellOutcome, slo: Slo | None = None) -> CellSummary | None:
        """The cell's files as a sweep keeps them (its summary judged against ``slo`` where there is one), and its
        replica's log (the start is at its top) less the cell's own lines, which are its server.log: LMCache logs
        every store, so a whole second copy doubles the archive."""
        summary = (summarize(outcome.requests, outcome.jobs, outcome.scheduler_trace, slo, outcome.config.cell.jps)
                   if outcome.status.is_done else None)  # fmt: skip
        write_attempt_files(CellFiles(directory), outcome, summary, row=None)
        self.measured_jct_s[f"{directory.parent.name}/{directory.name}"] = summary.jct_mean_s if summary else None
        (directory / "replica.log").write_text(without_cell_lines(self.worker.replica_log(), outcome.server_log))
        return summary

    def needs_start(self, cell: CellSpec) -> bool:
        """Whether ``cell`` starts a server of its own: its replica is not the one kept."""
        return not self.worker.keeps_replica_for(self.settled(cell))

    def settled(self, cell: CellSpec) -> CellSpec:
        """``cell`` eager once a compiled start has failed, as it is otherwise."""
        if self.eager_because is None:
            return cell
        return cell.model_copy(update={"engine_options": cell.engine_options.model_copy(update={"enforce_eager": True})})

    def simulated(self, cell: CellSpec, stack: str) -> CellOutcome:
        """``cell`` in the simulator with the engine stack ``stack``."""
        return _twin(self.worker, cell, stack)[1]

    def _run_checked(self, cell: CellSpec) -> tuple[CellOutcome, list[Check]]:
        """``cell`` run, its replica's reset proven after it, and the evidence both give."""
        return checked_cell(cell.gpu, cell, self._run, self.worker.prove_reset)

    def _run(self, cell: CellSpec) -> CellOutcome:
        """``cell`` run once, driven from here: its server may take what is left of the budget to start, which the
        budget then records."""
        limits = RunLimits(health_timeout_s=max(60.0, self.budget.left_s()), client_actors=0, max_attempts=1)
        outcome = self.worker.run(cell, limits)
        if (start_s := outcome.config.replica_start_s) is not None:
            self.budget.record_start(start_s)
        return outcome


def predicted_facts(worker: CellRunner, cell: CellSpec, stack: str) -> CellFacts:
    """``cell`` as the simulator predicts it with the engine stack ``stack``, run by ``worker``."""
    return cell_facts(*_twin(worker, cell, stack))


def _twin(worker: CellRunner, cell: CellSpec, stack: str) -> tuple[CellSpec, CellOutcome]:
    """``cell``'s simulated twin with the engine stack ``stack``, and its outcome run by ``worker``."""
    twin = simulated(cell, stack)
    return twin, worker.run(twin, RunLimits())


def why_not_done(outcome: CellOutcome) -> str:
    """The cell's reason and the last line of its server's log (a failed start's exception, most often)."""
    last = next((line.strip() for line in reversed(outcome.server_log.splitlines()) if line.strip()), "")
    return f"{outcome.status.value}: {outcome.reason}" + (f"; server log ends: {last[:300]}" if last else "")


def _cell_line(outcome: CellOutcome, summary: CellSummary) -> str:
    facts = outcome.config.engine_facts
    pool = f"KV pool {facts.num_kv_blocks} blocks x {facts.block_size} on {facts.device_name}" if facts else "no pool"
    return f"{summary.num_completed}/{summary.num_jobs} jobs, mean JCT {summary.jct_mean_s:.2f} s; {pool}"


def _start_kind(start: ReplicaStart) -> str:
    """How a replica started, in words: forked from the node's launcher or not (and why), and torch.compile's cache."""
    if start.forked:
        kind = "forked from the node's launcher"
    else:
        kind = f"started plainly ({start.plain_because})" if start.plain_because else "started plainly"
    return f"{kind}; torch.compile cache {start.compile_cache or 'unused'}"
