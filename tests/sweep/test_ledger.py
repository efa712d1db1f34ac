"""The ledger on a real MLflow store (sqlite): a sweep that starts again ends in MLflow every cell run whose status
tag says it ended but which MLflow still has running (its driver was killed between the two writes), with the run
status the tag maps to, and leaves alone what this sweep itself ends."""

from __future__ import annotations

from orchestrator.records.cell import CellStatus
from orchestrator.sweep.planning.cells import expand
from orchestrator.sweep.runtime.ledger import CellLedger
from orchestrator.sweep.runtime.results import SweepResults
from orchestrator.sweep.runtime.tracking import SweepTracker, default_tracking_uri
from tests.sweep.conftest import fake_spec

SWEEP = "ledger"
# Each status tag a cell run can end with, and the MLflow run status that goes with it.
ENDED = {"done": "FINISHED", "failed": "FAILED", "hung": "FAILED", "interrupted": "KILLED", "superseded": "FINISHED"}


def _tracker(results_dir) -> SweepTracker:
    return SweepTracker.open(default_tracking_uri(results_dir), results_dir / "artifacts", SWEEP, {})


def _killed_between_tag_and_end(tracker: SweepTracker, tags: list[str]) -> list[str]:
    """A cell run per tag, its status tag set as ``set_status`` sets it, and its MLflow run never ended: a driver
    killed (SIGKILL) between the two writes."""
    cells = expand(fake_spec(SWEEP, jps=tuple(range(1, len(tags) + 1))))
    run_ids = [tracker.start_cell(cell, 1, "slot-0", {}) for cell in cells]
    for run_id, tag in zip(run_ids, tags):
        tracker._client.set_tag(run_id, "status", tag)
    return run_ids


def _lifecycle(results_dir, run_id: str) -> tuple[str, str]:
    from mlflow import MlflowClient

    run = MlflowClient(default_tracking_uri(results_dir)).get_run(run_id)
    return run.data.tags["status"], run.info.status


def test_a_resumed_sweep_ends_the_mlflow_run_of_every_cell_whose_tag_says_it_ended(tmp_path):
    run_ids = _killed_between_tag_and_end(_tracker(tmp_path), list(ENDED))
    assert {_lifecycle(tmp_path, run_id)[1] for run_id in run_ids} == {"RUNNING"}
    ledger = CellLedger(SWEEP, _tracker(tmp_path), SweepResults(tmp_path / SWEEP), {})
    ledger.catch_up()  # as the driver prepares a run of the sweep
    ledger.retire_stale_runs()
    assert [_lifecycle(tmp_path, run_id) for run_id in run_ids] == list(ENDED.items())


def test_a_run_this_sweep_ends_itself_keeps_the_status_it_ended_with(tmp_path):
    (run_id,) = _killed_between_tag_and_end(_tracker(tmp_path), ["interrupted"])
    tracker = _tracker(tmp_path)
    tracker.cell_runs()
    tracker.set_status(run_id, CellStatus.DONE)  # as catching up a cell done on disk ends it
    tracker.end_runs_left_open()
    assert _lifecycle(tmp_path, run_id) == ("done", "FINISHED")
