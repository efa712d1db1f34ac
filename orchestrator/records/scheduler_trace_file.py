"""A cell's scheduler trace on disk: one parquet table (zstd), the same for the real engine and the simulator.

Every event kind of ``records.scheduler_trace`` is a row: ``kind``, ``t`` and ``replica`` (null in a cell of one), then the
union of the kinds' fields, null where a kind has none. Steps are most of the rows and change little from one to the
next, which zstd over columns stores in a small fraction of the JSON lines' bytes (an hour of Mooncake-shaped
traffic on eight simulated replicas: ``benchmarks/trace_scale.py``).

- The vLLM plugin writes JSON lines as it runs (a process that dies keeps what it wrote); the worker turns them into
  this table (``parquet_of_lines``), a row group per chunk of lines.
- The simulator's engines keep their decode runs whole (``records.scheduler_trace.DecodeSteps``); ``parquet_of_entries``
  expands them column by column, without an object per step.
- Readers: ``trace_frame`` (the table, for analysis) and ``trace_events`` (the events, for the records' summary and
  checks); both read the JSON lines of older results too.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from orchestrator.records.scheduler_trace import (
    KINDS,
    Admit,
    DecodeSteps,
    Evict,
    Finish,
    FinishAction,
    Step,
    TraceEntry,
    TraceEvent,
    Unpin,
    UnpinReason,
    read_trace,
)

PARQUET_MAGIC = b"PAR1"
ROW_GROUP_ROWS = 262_144
_INT = pa.int64()
SCHEMA = pa.schema([
    ("kind", pa.dictionary(pa.int8(), pa.string())), ("t", pa.float64()), ("replica", pa.int16()),
    ("step", _INT), ("running", _INT), ("waiting", _INT), ("scheduled", _INT), ("prefill_tokens", _INT),
    ("decode_tokens", _INT), ("context_tokens", _INT), ("attention_pairs", pa.float64()), ("free_blocks", _INT),
    ("pinned_blocks", _INT), ("preempted", _INT), ("request_id", pa.string()), ("job_id", pa.string()),
    ("turn", _INT), ("prompt_tokens", _INT), ("cached_tokens", _INT), ("is_last", pa.bool_()),
    ("action", pa.string()), ("reason", pa.string()), ("num_blocks", _INT), ("held_s", pa.float64()),
])  # fmt: skip
_FIELDS = {kind: [field.name for field in fields(kind)] for kind in (Step, Admit, Finish, Unpin, Evict)}


def is_parquet(data: bytes) -> bool:
    return data[:4] == PARQUET_MAGIC


def parquet_of_lines(data: bytes) -> bytes:
    """The plugin's JSON lines (a routed cell's merged ones, each with its ``replica``) as the trace table."""
    if not data.strip():
        return b""
    lines = (line for line in data.splitlines() if line.strip())
    return _written(_row_groups(json.loads(line) for line in lines))


def parquet_of_entries(per_replica: Sequence[Sequence[TraceEntry]]) -> bytes:
    """The simulator's trace as the table: each replica's entries, merged in time order as ``sim.loop.SimResult``
    merges them (a replica's events keep their order among equal times, replica 0's first)."""
    several = len(per_replica) > 1
    parts = [_entries_table(entries, replica if several else None) for replica, entries in enumerate(per_replica)]
    parts = [part for part in parts if part is not None]
    if not parts:
        return _written([SCHEMA.empty_table()])
    table = pa.concat_tables([part.table for part in parts])
    keys = [np.concatenate([getattr(part, name) for part in parts]) for name in ("place", "entry", "replica")]
    if several:
        keys.append(table.column("t").to_numpy())
    return _written([table.take(pa.array(np.lexsort(keys)))])


def trace_frame(data: bytes) -> pd.DataFrame:
    """The trace as a table, as pandas reads JSON lines: every column of ``SCHEMA``, those with nulls as floats."""
    if not data:
        return pd.DataFrame(columns=SCHEMA.names)
    if not is_parquet(data):
        return pd.read_json(io.BytesIO(data), lines=True)
    return _frame(pq.read_table(io.BytesIO(data)))


def trace_file_frame(path: Path, kinds: Iterable[str] | None = None) -> pd.DataFrame:
    """``trace_frame`` of a file: a cell's ``scheduler_trace.parquet``, or JSON lines (gzipped or not) of older
    results and of a GPU run's shipped traces; with ``kinds``, only those rows, read from parquet a row group at a
    time (a cell's events but its steps are a small part of it)."""
    path = Path(path)
    if path.suffix != ".parquet":
        frame = pd.read_json(path, lines=True)
        return frame if kinds is None or not len(frame) else frame[frame.kind.isin(list(kinds))]
    if kinds is None:
        return trace_frame(path.read_bytes())
    return _frame(_rows_of_kinds(path, kinds))


def _frame(table: pa.Table) -> pd.DataFrame:
    """A trace table in pandas, its ``kind`` plain strings as JSON lines read (not a dictionary's categories)."""
    frame = table.to_pandas()
    frame["kind"] = frame["kind"].astype(str)
    return frame


def _rows_of_kinds(source: Path | io.BytesIO, kinds: Iterable[str]) -> pa.Table:
    """The rows of ``kinds``, filtered a row group at a time: never the whole table in memory."""
    wanted = pa.array(list(kinds), pa.string())
    batches = (batch.filter(pc.is_in(batch.column("kind").cast(pa.string()), value_set=wanted))
               for batch in pq.ParquetFile(source).iter_batches(batch_size=ROW_GROUP_ROWS))  # fmt: skip
    return pa.Table.from_batches(batches, schema=SCHEMA)


def step_batches(path: Path, columns: Sequence[str]) -> Iterator[pd.DataFrame]:
    """The ``step`` rows of a trace file in order, ``columns`` of them, a row group at a time (memory bounded
    whatever the trace's length; an older result's JSON lines at once)."""
    path = Path(path)
    if path.suffix != ".parquet":
        frame = pd.read_json(path, lines=True)
        if len(frame):
            yield frame.loc[frame.kind == "step", [column for column in columns if column in frame]]
        return
    source = pq.ParquetFile(path)
    for batch in source.iter_batches(batch_size=ROW_GROUP_ROWS, columns=["kind", *columns]):
        frame = batch.to_pandas()
        yield frame.loc[frame.kind == "step", list(columns)]


def time_range(path: Path) -> tuple[float, float] | None:
    """The first and last ``t`` of a parquet trace from its row groups' statistics (no rows read); None when the
    file does not say."""
    metadata = pq.ParquetFile(path).metadata
    index = metadata.schema.to_arrow_schema().get_field_index("t")
    lows, highs = [], []
    for group in range(metadata.num_row_groups):
        statistics = metadata.row_group(group).column(index).statistics
        if statistics is None or not statistics.has_min_max:
            return None
        lows.append(statistics.min)
        highs.append(statistics.max)
    return (min(lows), max(highs)) if lows else None


def trace_events(data: bytes, kinds: Iterable[str] | None = None) -> list[TraceEvent]:
    """The trace's events in order, as ``records.scheduler_trace.read_trace`` reads JSON lines: with ``kinds``, only those,
    and rows of no kind it knows (a test's probe events) left out either way."""
    if not is_parquet(data):
        return read_trace(data, kinds)
    known = [kind for kind in (KINDS if kinds is None else kinds) if kind in KINDS]
    return [_event(KINDS[row["kind"]], row) for row in _rows_of_kinds(io.BytesIO(data), known).to_pylist()]


def _event(kind: type, row: dict) -> TraceEvent:
    values = {name: row[name] for name in _FIELDS[kind]}
    if kind is Step and not values["scheduled"]:
        values["attention_pairs"] = 0  # a step that computed nothing (only loads) has always written an int there
    elif kind is Finish:
        values["action"] = FinishAction(values["action"])
    elif kind is Unpin:
        values["reason"] = UnpinReason(values["reason"])
    return kind(**values)


def _row_groups(rows: Iterable[dict]) -> Iterable[pa.Table]:
    chunk: list[dict] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == ROW_GROUP_ROWS:
            yield pa.Table.from_pylist(chunk, schema=SCHEMA)
            chunk = []
    if chunk:
        yield pa.Table.from_pylist(chunk, schema=SCHEMA)


def _written(tables: Iterable[pa.Table]) -> bytes:
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, SCHEMA, compression="zstd") as writer:
        for table in tables:
            writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
    return sink.getvalue()


@dataclass(frozen=True)
class _Rows:
    """One replica's rows, unordered, with what orders them: the entry each came from and its place in it."""

    table: pa.Table
    entry: np.ndarray
    place: np.ndarray
    replica: np.ndarray


def _entries_table(entries: Sequence[TraceEntry], replica: int | None) -> _Rows | None:
    """One replica's entries as columns: the decode runs' steps built with numpy, the other events row by row."""
    runs = [(index, entry) for index, entry in enumerate(entries) if isinstance(entry, DecodeSteps)]
    events = [(index, entry) for index, entry in enumerate(entries) if not isinstance(entry, DecodeSteps)]
    parts, entry_of_row, place_in_entry = [], [], []
    if runs:
        counts = np.array([len(run.starts) for _, run in runs])
        parts.append(_decode_table([run for _, run in runs], counts))
        entry_of_row.append(np.repeat([index for index, _ in runs], counts))
        place_in_entry.append(np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))
    if events:
        parts.append(pa.Table.from_pylist([_row(event) for _, event in events], schema=SCHEMA))
        entry_of_row.append(np.array([index for index, _ in events]))
        place_in_entry.append(np.zeros(len(events), dtype=np.int64))
    if not parts:
        return None
    table = pa.concat_tables(parts)
    if replica is not None:
        table = table.set_column(2, "replica", pa.array(np.full(table.num_rows, replica), pa.int16()))
    return _Rows(table, np.concatenate(entry_of_row), np.concatenate(place_in_entry),
                 np.full(table.num_rows, replica or 0))  # fmt: skip


def _row(event: TraceEvent) -> dict:
    return {"kind": event.kind, **vars(event), "action": _text(getattr(event, "action", None)),
            "reason": _text(getattr(event, "reason", None))}  # fmt: skip


def _decode_table(runs: list[DecodeSteps], counts: np.ndarray) -> pa.Table:
    """Every step of ``runs`` (``counts[i]`` of run ``i``), run after run."""
    total = int(counts.sum())
    place = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)  # each step's place in its run
    per_run = lambda values: np.repeat(np.array(values, dtype=np.int64), counts)  # noqa: E731
    running = per_run([run.running for run in runs])
    context = per_run([run.context_tokens for run in runs]) + place * running
    zeros = np.zeros(total, dtype=np.int64)
    columns = {
        "kind": pa.DictionaryArray.from_arrays(np.zeros(total, dtype=np.int8), ["step"]),
        "t": np.fromiter((start for run in runs for start in run.starts), dtype=np.float64, count=total),
        "step": per_run([run.first_step for run in runs]) + place, "running": running, "waiting": zeros,
        "scheduled": running, "prefill_tokens": zeros, "decode_tokens": running, "context_tokens": context,
        "attention_pairs": context.astype(np.float64),
        "free_blocks": np.fromiter((free for run in runs for free in run.free_blocks), dtype=np.int64, count=total),
        "pinned_blocks": per_run([run.pinned_blocks for run in runs]), "preempted": zeros,
    }  # fmt: skip
    arrays = [pa.array(columns[name], type=SCHEMA.field(name).type) if name in columns
              else pa.nulls(total, SCHEMA.field(name).type) for name in SCHEMA.names]  # fmt: skip
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _text(value) -> str | None:
    return None if value is None else value.value
