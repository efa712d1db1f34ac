"""A verdict: which policy wins one comparison (a GPU type, DRAM budget, load and engine), as one typed value
from the statistics that decide it (``analysis/verdicts.py``) to the report, MLflow and the crossover search
(pure).

On disk it is a row of ``report/tables/verdicts.csv``, whose first twelve columns are the contract other
scripts read (``CSV_COLUMNS``); ``read_verdicts`` turns the file back into verdicts.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from orchestrator.records.names import current_names

# The smallest margin a verdict names: paired on identical jobs, a systematic 0.1% gap can be "beyond the
# uncertainty", yet no user would switch policies for it and no engine here resolves it run to run.
MIN_EFFECT_PCT = 1.0
# How a simulated verdict whose margin does not clear the simulator's error begins its note.
TOO_CLOSE = "too close to call in simulation"


class VerdictKind(str, enum.Enum):
    WIN = "win"  # the leader beats every rival beyond the uncertainty and completes as many jobs
    TIE = "tie"  # no policy does
    TRADE_OFF = "trade-off"  # a rival is faster beyond the uncertainty, but lost jobs the leader completed
    UNDECIDED = "undecided"  # fewer than two policies done


@dataclass(frozen=True)
class Verdict:
    gpu: str
    dram_gb: float
    jps: float
    engine: str
    kind: VerdictKind
    leader: str | None  # the fastest policy that no rival out-completes beyond the uncertainty
    tied_with: tuple[str, ...]  # the leader and the rivals it does not beat (empty for a win)
    margin_pct: float  # the leader's margin over its closest rival (negative: the rival is faster)
    margin_lo_pct: float
    margin_hi_pct: float
    num_trials: int
    note: str = ""
    faster: str | None = None  # of a trade-off: the faster policy that lost jobs
    faster_by_pct: float = math.nan  # how much lower its mean job time is than the leader's
    jobs_lost: int = 0  # its jobs that timed out or failed, over all trials
    num_jobs: int = 0  # its jobs, over all trials
    replicas: int = 1  # per cell; past one, the compared policies are "policy @ router"
    within_sim_error: bool = False  # simulated, with a margin inside the simulator's error: too close to call there
    kv_regimes: str = ""  # each policy's measured KV regime (records/regime.py): "policy: regime (evidence); ..."

    @property
    def significant(self) -> bool:
        return self.kind is VerdictKind.WIN

    @property
    def label(self) -> str:
        """The verdict in one word: the winner's name, ``tie``, ``trade-off`` or ``undecided``."""
        return self.leader if self.kind is VerdictKind.WIN else self.kind.value

    @property
    def where(self) -> str:
        routed = f"/x{self.replicas}" if self.replicas > 1 else ""
        return f"{self.gpu}/{self.dram_gb:g}GiB/{self.jps:g}jps{routed}"

    def in_words(self) -> str:
        if self.kind is VerdictKind.WIN:
            return f"{self.leader} wins by {self.margin_pct:.1f}% [{self.margin_lo_pct:.1f}, {self.margin_hi_pct:.1f}]"
        if self.kind is VerdictKind.TIE:
            return f"tie: {', '.join(self.tied_with)}"
        if self.kind is VerdictKind.TRADE_OFF:
            return (f"trade-off: {self.faster}'s mean job time is {self.faster_by_pct:.0f}% lower than "
                    f"{self.leader}'s, but {self.jobs_lost} of its {self.num_jobs} jobs were lost (timed out or failed)")
        return f"undecided: {self.note}"

    def to_row(self) -> dict:
        """The verdict's ``verdicts.csv`` row."""
        return {"gpu": self.gpu, "dram_gb": self.dram_gb, "jps": self.jps, "engine": self.engine,
                "winner": None if self.kind is VerdictKind.UNDECIDED else self.label,
                "significant": self.significant, "tied_with": ", ".join(self.tied_with),
                "margin_pct": self.margin_pct, "margin_lo_pct": self.margin_lo_pct,
                "margin_hi_pct": self.margin_hi_pct, "num_trials": self.num_trials, "note": self.note,
                "kind": self.kind.value, "leader": self.leader, "faster": self.faster,
                "faster_by_pct": self.faster_by_pct, "jobs_lost": self.jobs_lost, "num_jobs": self.num_jobs,
                "in_words": self.in_words(), "replicas": self.replicas,
                "within_sim_error": self.within_sim_error, "kv_regimes": self.kv_regimes}  # fmt: skip

    @classmethod
    def from_row(cls, row: Mapping) -> Verdict:
        row = current_names(row)

        def text(name: str) -> str | None:
            value = row[name]
            return None if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)

        return cls(gpu=str(row["gpu"]), dram_gb=float(row["dram_gb"]), jps=float(row["jps"]),
                   engine=str(row["engine"]), kind=VerdictKind(row["kind"]), leader=text("leader"),
                   tied_with=tuple(filter(None, (text("tied_with") or "").split(", "))),
                   margin_pct=float(row["margin_pct"]), margin_lo_pct=float(row["margin_lo_pct"]),
                   margin_hi_pct=float(row["margin_hi_pct"]), num_trials=int(row["num_trials"]),
                   note=text("note") or "", faster=text("faster"), faster_by_pct=float(row["faster_by_pct"]),
                   jobs_lost=int(row["jobs_lost"]), num_jobs=int(row["num_jobs"]),
                   replicas=int(row.get("replicas", 1)),
                   # files written before the field: the note said so in words
                   within_sim_error=_flag(row.get("within_sim_error", (text("note") or "").startswith(TOO_CLOSE))),
                   kv_regimes=(text("kv_regimes") or "") if "kv_regimes" in row else "")  # fmt: skip


def _flag(value: object) -> bool:
    """A boolean as a CSV row holds it (pandas reads a column of True and False as booleans, else as text)."""
    return str(value) == "True"


CSV_COLUMNS = list(Verdict(gpu="", dram_gb=0, jps=0, engine="", kind=VerdictKind.UNDECIDED, leader=None, tied_with=(),
                           margin_pct=math.nan, margin_lo_pct=math.nan, margin_hi_pct=math.nan,
                           num_trials=0).to_row())  # fmt: skip


def changes(found: list[Verdict]) -> list[tuple[Verdict, Verdict]]:
    """Each change of verdict between adjacent loads of one line (a GPU, DRAM budget, engine and replica count): the
    verdicts either side of it."""

    def line(verdict: Verdict) -> tuple:
        return verdict.gpu, verdict.dram_gb, verdict.engine, verdict.replicas

    by_line = sorted(found, key=lambda verdict: (*line(verdict), verdict.jps))
    return [(below, above) for below, above in zip(by_line, by_line[1:])
            if line(below) == line(above) and below.label != above.label]  # fmt: skip


def verdict_frame(verdicts: list[Verdict]) -> pd.DataFrame:
    """``verdicts.csv`` as a table."""
    return pd.DataFrame([verdict.to_row() for verdict in verdicts], columns=CSV_COLUMNS)


def read_verdicts(path: Path) -> list[Verdict]:
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    return [Verdict.from_row(row) for row in frame.to_dict("records")]
