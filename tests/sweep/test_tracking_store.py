"""A new local tracking store (sqlite) is a copy of an empty one the node keeps per MLflow schema: it must read as a
store MLflow made itself, tables, schema version and default experiment alike, and where the copy cannot be made
MLflow still makes the store."""

from __future__ import annotations

import sqlite3

from orchestrator.sweep.runtime import tracking
from orchestrator.sweep.runtime.tracking import SweepTracker, default_tracking_uri


def _open(results_dir):
    return SweepTracker.open(default_tracking_uri(results_dir), results_dir / "artifacts", "store", {})


def _schema_and_experiments(results_dir) -> tuple[list, list]:
    with sqlite3.connect(results_dir / "mlflow.db") as db:
        # Tables, indexes and columns (the CREATE texts are not compared: MLflow's own vary from store to store).
        schema = sorted(db.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))
        schema += [(table, *column[1:3]) for (kind, table) in schema if kind == "table"
                   for column in db.execute(f"PRAGMA table_info('{table}')")]  # fmt: skip
        schema.append(db.execute("SELECT version_num FROM alembic_version").fetchall())
        experiments = db.execute("SELECT experiment_id, name, artifact_location FROM experiments ORDER BY 1").fetchall()
    return schema, experiments


def test_a_new_store_is_a_copy_of_the_nodes_empty_one_and_reads_as_one_mlflow_made(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSWEEP_CACHE", str(tmp_path / "cache"))
    copied, made = tmp_path / "copied", tmp_path / "made"
    tracking._create_from_empty_store(copied / "mlflow.db")
    (empty,) = (tmp_path / "cache" / "mlflow").glob("empty-*.db")
    assert (copied / "mlflow.db").read_bytes() == empty.read_bytes()
    _open(copied)
    with monkeypatch.context() as plain:
        plain.setattr(tracking, "_create_from_empty_store", lambda path: None)
        _open(made)
    (copied_schema, copied_experiments), (made_schema, made_experiments) = map(_schema_and_experiments, (copied, made))
    assert copied_schema == made_schema
    # MLflow's default experiment and the sweep's, each with its own store's locations, not the empty store's.
    assert [row[:2] for row in copied_experiments] == [row[:2] for row in made_experiments] == [(0, "Default"),
                                                                                                 (1, "store")]
    assert all(str(tmp_path / "cache") not in (row[2] or "") for row in copied_experiments)


def test_where_the_node_keeps_nothing_mlflow_makes_the_store(tmp_path, monkeypatch):
    (tmp_path / "not-a-directory").write_text("")
    monkeypatch.setenv("KVSWEEP_CACHE", str(tmp_path / "not-a-directory"))
    tracker = _open(tmp_path / "results")
    assert tracker.parent_run_id and _schema_and_experiments(tmp_path / "results")[1][1][1] == "store"
