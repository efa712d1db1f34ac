"""Writing and reading a cell's raw records as parquet, atomically.

A file is written to a temporary name in the same directory and renamed into place, so a reader never sees
a half-written table and a crash leaves either the old file or the new one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from orchestrator.records.layout import CellFiles
from orchestrator.records.schema import JobRecord, RequestRecord, to_row


def records_frame(records: Sequence[RequestRecord | JobRecord]) -> pd.DataFrame:
    return pd.DataFrame([to_row(record) for record in records])


def write_cell_records(files: CellFiles, requests: Sequence[RequestRecord], jobs: Sequence[JobRecord]) -> None:
    atomic_write_parquet(records_frame(requests), files.requests)
    atomic_write_parquet(records_frame(jobs), files.jobs)


def atomic_write_parquet(frame: pd.DataFrame, path: Path) -> None:
    _atomic_write(path, lambda handle: frame.to_parquet(handle, index=False))


def atomic_write_csv(frame: pd.DataFrame, path: Path) -> None:
    _atomic_write(path, lambda handle: handle.write(frame.to_csv(index=False).encode()))


def atomic_write_json(payload, path: Path) -> None:
    text = json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n"
    _atomic_write(path, lambda handle: handle.write(text.encode()))


def atomic_write_bytes(data: bytes, path: Path) -> None:
    _atomic_write(path, lambda handle: handle.write(data))


def _atomic_write(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, staging = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(staging, 0o644)  # mkstemp makes files private; results are meant to be shared
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise
