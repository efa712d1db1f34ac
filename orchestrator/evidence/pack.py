"""What an evidence run hands back: each stage's outcome, a summary a person reads, and every file packed so that
a machine returning at most eight files returns all of it.

``pack`` runs after every stage, and replaces each packed file whole (written beside it, then renamed): a run
cut at any moment leaves the evidence of every stage that had finished, never a half-written archive.
"""

from __future__ import annotations

import json
import os
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

SUMMARY_FILE = "summary.md"
EVIDENCE_FILE = "evidence.json"
ARCHIVE_FILE = "evidence.tar.xz"  # xz: two fifths smaller than gzip, and what travels back is counted
PACKED_FILES = (SUMMARY_FILE, EVIDENCE_FILE, ARCHIVE_FILE)


@dataclass(frozen=True)
class StageResult:
    """One stage: ``status`` is done, failed (it ran and something did not hold), skipped (it did not start:
    the budget, the device or a stage before it) or cut (the run was stopped inside it)."""

    name: str
    status: str
    seconds: float
    detail: str
    table: str = ""  # the stage's own table (checks, phases, rates), printed under it
    facts: dict = field(default_factory=dict)  # its figures, for evidence.json


@dataclass(frozen=True)
class EvidenceHeader:
    """What the run is: the command, the device and stack, the budget."""

    command: str
    target: str
    device: str
    stack: str
    budget_s: float


def summary_markdown(header: EvidenceHeader, stages: list[StageResult]) -> str:
    lines = [f"# GPU evidence: {header.target}", "", f"- command: `{header.command}`", f"- device: {header.device}",
             f"- stack: {header.stack}", f"- budget: {header.budget_s:.0f} s, "
             f"used {sum(stage.seconds for stage in stages):.0f} s", "", stage_table(stages)]  # fmt: skip
    for stage in stages:
        if stage.table:
            lines += ["", f"## {stage.name}: {stage.status}", "", "```", stage.table, "```"]
    return "\n".join(lines) + "\n"


def stage_table(stages: list[StageResult]) -> str:
    """The stages as a fixed-width table (printed at the end of a run and at the top of the summary)."""
    name_width = max([len("stage"), *(len(stage.name) for stage in stages)])
    lines = [f"{'stage':<{name_width}}  {'status':<7}  {'s':>6}  detail"]
    lines += [f"{s.name:<{name_width}}  {s.status:<7}  {s.seconds:6.1f}  {s.detail}" for s in stages]
    return "\n".join(lines)


def seconds(value: float | None) -> str:
    """A time in the summary's tables: ``12.34 s``, or ``-`` where there is none."""
    return "-" if value is None else f"{value:.2f} s"


def without_cell_lines(replica_log: str, cell_log: str) -> str:
    """A replica's log with the lines its cell's own log (server.log) holds replaced by one line saying so."""
    if not cell_log.strip() or cell_log not in replica_log:
        return replica_log
    return replica_log.replace(cell_log, f"[{len(cell_log.splitlines())} lines of this cell: its server.log]\n", 1)


def pack(work_dir: Path, out_dir: Path, header: EvidenceHeader, stages: list[StageResult]) -> None:
    """Write the summary and evidence.json into ``work_dir``, then replace ``out_dir``'s three packed files: the
    summary, evidence.json, and every file of ``work_dir`` as one xz'd tar."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summary_markdown(header, stages)
    evidence = json.dumps({"header": asdict(header), "stages": [asdict(stage) for stage in stages]}, indent=2)
    for directory in (work_dir, out_dir):
        _replace(directory / SUMMARY_FILE, summary.encode())
        _replace(directory / EVIDENCE_FILE, evidence.encode())
    partial = out_dir / f".{ARCHIVE_FILE}.partial"
    with tarfile.open(partial, "w:xz") as archive:
        archive.add(work_dir, arcname="evidence")
    os.replace(partial, out_dir / ARCHIVE_FILE)


def _replace(path: Path, data: bytes) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)
