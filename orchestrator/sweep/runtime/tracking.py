"""MLflow tracking of a sweep: one parent run per sweep, one child run per cell attempt.

The ``status`` tag of a child run is the truth about a cell: ``done`` is written last, after every
artifact and metric, so a run that says ``done`` is complete. Resume reads these tags. MLflow's own run status
follows the tag, ended in the same call; a driver killed between the two leaves a run whose tag says it ended while
MLflow still has it running, and the next run of the sweep ends it (``end_runs_left_open``). Only the driver
writes here (MLflow's sqlite store races on first use when several processes create it).

Every call to the store is retried with backoff while the store does not answer (a shared server restarting),
for up to the sweep's patience; past it, or at once on a full disk, the sweep stops (``runtime.stops``). The
driver does its own backoff, so it asks MLflow's HTTP client for none (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``
unless the user set it): MLflow's own would wait minutes per call without a word.
"""

from __future__ import annotations

import math
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlparse, urlsplit, urlunsplit

from orchestrator.cell.spec import CellSpec
from orchestrator.inputs.validation import InputError, first_line
from orchestrator.models.cache import cache_root
from orchestrator.records.cell import CellStatus, FailureKind
from orchestrator.records.summary import CellSummary
from orchestrator.records.verdict import Verdict
from orchestrator.sweep.runtime.stops import DiskFull, TrackingUnavailable, is_disk_full

SQLITE_PREFIX = "sqlite:///"
DEFAULT_PATIENCE_S = 300.0
# MLflow's error codes for a store that is down, restarting or overloaded (a refused connection is INTERNAL_ERROR):
# worth another try. Any other code is an answer, and retrying it would not change it.
_OUTAGE_CODES = frozenset({"INTERNAL_ERROR", "TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED", "DEADLINE_EXCEEDED"})
# MLflow's own run status for each of ours, so the UI's status column agrees with the tag.
_RUN_STATUS = {
    CellStatus.RUNNING: "RUNNING",
    CellStatus.DONE: "FINISHED",
    CellStatus.FAILED: "FAILED",
    CellStatus.HUNG: "FAILED",
    CellStatus.INTERRUPTED: "KILLED",
    CellStatus.SUPERSEDED: "FINISHED",
}


def default_tracking_uri(results_dir: Path) -> str:
    return SQLITE_PREFIX + str((results_dir / "mlflow.db").absolute())


def absolute_tracking_uri(uri: str) -> str:
    """A sqlite or file URI made absolute against the launch directory (a Ray job runs in a temporary copy)."""
    if uri.startswith(SQLITE_PREFIX) and not uri.startswith(SQLITE_PREFIX + "/"):
        return SQLITE_PREFIX + str(Path(uri.removeprefix(SQLITE_PREFIX)).absolute())
    if "://" not in uri:
        return Path(uri).absolute().as_uri()
    return uri


def without_credentials(uri: str) -> str:
    """``uri`` as the sweep prints it: without the user and password it may hold (``https://user:secret@host``,
    ``postgresql://user:secret@host/db``), so a runs page link still opens and asks for them. The sweep writes
    tracking URIs only this way; MLflow itself gets the URI as given (credentials belong in
    MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD: docs/clusters.md, 'A shared MLflow server')."""
    parts = urlsplit(uri)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])) if "@" in parts.netloc else uri


# The stores MLflow's tracking client opens (a database scheme may name its driver: postgresql+psycopg2).
TRACKING_SCHEMES = ("sqlite", "file", "http", "https", "postgresql", "mysql", "mssql", "databricks")


def check_tracking_server(uri: str, timeout_s: float = 5.0) -> None:
    """Raises ``InputError`` for a URI of no store MLflow opens (its own error is a traceback after seconds), and
    within ``timeout_s`` when an http(s) tracking URI has no MLflow server behind it (MLflow's own client retries
    for minutes before it says so)."""
    scheme = urlsplit(uri).scheme.partition("+")[0]
    if scheme not in TRACKING_SCHEMES:
        raise InputError(f"--tracking-uri {without_credentials(uri)}: unknown scheme {scheme!r}; valid: "
                         "sqlite:///PATH.db, file:///PATH, http(s)://HOST:PORT of an `mlflow server`, "
                         "postgresql://, mysql://, mssql:// or databricks")  # fmt: skip
    if scheme not in ("http", "https"):
        return
    try:
        # /health asks for no credentials, on MLflow's basic-auth app too.
        with urllib.request.urlopen(without_credentials(uri).rstrip("/") + "/health", timeout=timeout_s) as response:
            if response.status == 200:
                return
            problem = f"/health answered HTTP {response.status}"
    except urllib.error.HTTPError as error:
        problem = f"/health answered HTTP {error.code}"
    except (urllib.error.URLError, OSError) as error:
        problem = str(getattr(error, "reason", error))
    raise InputError(
        f"--tracking-uri {without_credentials(uri)}: no MLflow server answers there ({problem}); valid: the URL of a running "
        "`mlflow server`, or sqlite:///ABSOLUTE/PATH.db (the default keeps it beside the results)"
    )


def store_exists(uri: str) -> bool:
    """False only for a local store that has not been created yet (reading it would create it)."""
    if uri.startswith(SQLITE_PREFIX):
        return Path(uri.removeprefix(SQLITE_PREFIX)).exists()
    if uri.startswith("file:"):
        return Path(urlparse(uri).path).exists()
    return True


def runs_page(tracking_uri: str, experiment_id: str) -> str:
    """Where a user sees the sweep's runs: the experiment's runs page (a bare experiment link can open on
    MLflow 3's GenAI overview, empty for us, since that switch is kept per browser), on the tracking server
    itself, or, for a local store, on the UI that ``mlflow ui`` serves over it."""
    page = f"#/experiments/{experiment_id}/runs"
    if tracking_uri.startswith(("http://", "https://")):
        return f"{without_credentials(tracking_uri).rstrip('/')}/{page}"
    return f"http://127.0.0.1:5000/{page} (start the UI: mlflow ui --backend-store-uri {without_credentials(tracking_uri)})"


def retry_delays(first_s: float = 1.0, cap_s: float = 30.0) -> Iterator[float]:
    """Seconds to wait before each next try: doubling from ``first_s``, then ``cap_s`` for as long as asked."""
    delay = first_s
    while True:
        yield delay
        delay = min(2 * delay, cap_s)


def is_outage(error: BaseException) -> bool:
    """The store did not answer (refused, reset, timed out, or said it is unavailable); not an answer it gave."""
    import requests
    from mlflow.exceptions import MlflowException

    if isinstance(error, (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError)):
        return True
    return isinstance(error, MlflowException) and error.error_code in _OUTAGE_CODES


class RetryingClient:
    """An ``MlflowClient`` whose every call is retried with backoff while the store is out, for up to
    ``patience_s`` in all; then ``TrackingUnavailable``. A full disk under the store raises ``DiskFull`` at once.
    ``on_wait`` hears each wait in one line; ``stopping`` (the driver got a signal) ends the waiting early."""

    def __init__(self, client, where: str, store_dir: Path | None, patience_s: float,
                 on_wait: Callable[[str], None] = print, stopping: Callable[[], bool] = lambda: False):  # fmt: skip
        self._client, self._where, self._store_dir, self.patience_s = client, where, store_dir, patience_s
        self.on_wait, self.stopping = on_wait, stopping
        self._gave_up = False  # once out past the patience, each call gets one try (the sweep is stopping)

    def __getattr__(self, name: str):
        method = getattr(self._client, name)
        return (lambda *args, **kwargs: self._call(name, method, args, kwargs)) if callable(method) else method

    def _call(self, name: str, method, args, kwargs):
        started, tries = time.monotonic(), 0
        for delay in retry_delays():
            tries += 1
            try:
                answer = method(*args, **kwargs)
                self._gave_up = False
                return answer
            except Exception as error:
                if is_disk_full(error):
                    raise DiskFull(self._store_dir or Path.cwd(), f"writing to the tracking store ({name})", error) from error
                if not is_outage(error):
                    raise
                waited = time.monotonic() - started
                if self._gave_up or waited + delay > self.patience_s or self.stopping():
                    self._gave_up = True
                    raise TrackingUnavailable(self._where, waited, tries, error) from error
                self.on_wait(f"tracking store at {self._where} not answering ({name}: {first_line(error)[:160]}); "
                             f"try {tries + 1} in {delay:g} s, giving up {self.patience_s - waited:.0f} s from now")  # fmt: skip
                time.sleep(delay)


@dataclass(frozen=True)
class CellRun:
    run_id: str
    cell_key: str
    status: CellStatus
    attempt: int


# MLflow 3 opens an experiment without this tag on its GenAI overview (traces, empty for us); marked as
# model development, the UI opens a sweep on its runs.
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}


class SweepTracker:
    def __init__(self, client, experiment_id: str, parent_run_id: str | None, sweep: str):
        self._client = client
        self._experiment_id = experiment_id
        self._parent_run_id = parent_run_id
        self._sweep = sweep
        # The cell runs as read once and kept up to date with this tracker's own writes since: a search runs its
        # sweep many times in one process, and reading every run back from the store each time grows with the sweep.
        self._cell_runs: dict[str, list[CellRun]] | None = None
        self._left_open: list[CellRun] = []  # as read: runs whose tag says they ended, still running in MLflow

    @classmethod
    def open(cls, tracking_uri: str, artifact_root: Path | None, sweep: str, sweep_params: dict[str, str],
             patience_s: float = DEFAULT_PATIENCE_S) -> SweepTracker:  # fmt: skip
        """The sweep's experiment and parent run, created if absent (this creates the store); every call retried
        while the store is out, for up to ``patience_s``."""
        client = retrying_client(tracking_uri, artifact_root, patience_s)
        experiment = client.get_experiment_by_name(sweep)
        if experiment is None:
            location = (artifact_root / sweep).absolute().as_uri() if artifact_root else None
            experiment_id = client.create_experiment(sweep, artifact_location=location, tags=EXPERIMENT_TAGS)
        else:
            experiment_id = experiment.experiment_id
            for key, value in EXPERIMENT_TAGS.items():  # experiments made by an older version lack them
                client.set_experiment_tag(experiment_id, key, value)
        tracker = cls(client, experiment_id, None, sweep)
        tracker._parent_run_id = tracker._find_parent() or tracker._create_parent(sweep_params)
        client.update_run(tracker._parent_run_id, status="RUNNING")
        return tracker

    @classmethod
    def read_only(cls, tracking_uri: str, sweep: str) -> SweepTracker | None:
        """The sweep's tracker if its store and experiment exist; never creates anything."""
        if not store_exists(tracking_uri):
            return None
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri)
        experiment = client.get_experiment_by_name(sweep)
        if experiment is None:
            return None
        tracker = cls(client, experiment.experiment_id, None, sweep)
        tracker._parent_run_id = tracker._find_parent()
        return tracker

    def when_waiting(self, on_wait: Callable[[str], None], stopping: Callable[[], bool]) -> None:
        """Where the waits for an absent store are told, and what ends them early."""
        self._client.on_wait, self._client.stopping = on_wait, stopping

    @property
    def parent_run_id(self) -> str | None:
        return self._parent_run_id

    @property
    def experiment_id(self) -> str:
        return self._experiment_id

    def cell_runs(self) -> dict[str, list[CellRun]]:
        """Every cell attempt recorded for this sweep, by cell key, oldest first (read from the store the first
        time, then as this tracker has written them)."""
        if self._cell_runs is None:
            self._cell_runs = self._read_cell_runs()
        return {key: list(runs) for key, runs in self._cell_runs.items()}

    def _read_cell_runs(self) -> dict[str, list[CellRun]]:
        runs: dict[str, list[CellRun]] = {}
        for run in self._search("tags.kind = 'cell'"):
            tags = run.data.tags
            key = tags["cell_key"]
            cell_run = CellRun(run.info.run_id, key, CellStatus(tags["status"]), int(tags.get("attempt", 1)))
            runs.setdefault(key, []).append(cell_run)
            if run.info.status == "RUNNING" and _RUN_STATUS.get(cell_run.status, "RUNNING") != "RUNNING":
                self._left_open.append(cell_run)
        for attempts in runs.values():
            attempts.sort(key=lambda cell_run: cell_run.attempt)
        return runs

    def end_runs_left_open(self) -> None:
        """End in MLflow every cell run whose status tag says it ended (done, failed, ...) but which MLflow still has
        running, with the run status its tag maps to: its driver was killed between the two writes of
        ``set_status``, and no later run of the sweep runs the cell again to end it."""
        self.cell_runs()
        for run in self._left_open:
            self._client.set_terminated(run.run_id, _RUN_STATUS[run.status])
        self._left_open = []

    def start_cell(self, cell: CellSpec, attempt: int, slot: str, extra_tags: dict[str, str]) -> str:
        from mlflow.entities import Param

        tags = {
            "mlflow.parentRunId": self._parent_run_id,
            "kind": "cell",
            "sweep": self._sweep,
            "cell_key": cell.key,
            "status": CellStatus.RUNNING.value,
            "engine": cell.engine.value,
            "gpu": cell.gpu,
            "policy": cell.policy,
            "weights": cell.weights.value,
            "workload_source": cell.workload.source,
            "attempt": str(attempt),
            "slot": slot,
            **extra_tags,
        }
        run = self._client.create_run(self._experiment_id, tags=tags, run_name=f"{cell.label} #{attempt}")
        params = [Param(key, value) for key, value in cell.params().items()]
        self._client.log_batch(run.info.run_id, params=params)
        if self._cell_runs is not None:
            self._cell_runs.setdefault(cell.key, []).append(CellRun(run.info.run_id, cell.key, CellStatus.RUNNING, attempt))
        return run.info.run_id

    def record_outcome(self, run_id: str, summary: CellSummary | None, tags: dict[str, str], artifact_dir: Path) -> None:
        """Metrics, tags and artifacts of a finished attempt; the status is set separately, last."""
        from mlflow.entities import RunTag

        metrics = cell_metrics(summary) if summary else []
        self._client.log_batch(run_id, metrics=metrics, tags=[RunTag(key, value) for key, value in tags.items()])
        self._client.log_artifacts(run_id, str(artifact_dir))

    def set_status(self, run_id: str, status: CellStatus, reason: str | None = None,
                   failure_kind: FailureKind | None = None) -> None:  # fmt: skip
        if reason:
            self._client.set_tag(run_id, "reason", reason[:5000])
        if failure_kind is not None:  # what code reads: the reason's wording is for people
            self._client.set_tag(run_id, "failure", failure_kind.value)
        self._client.set_tag(run_id, "status", status.value)
        if status is not CellStatus.RUNNING:
            self._client.set_terminated(run_id, _RUN_STATUS[status])
            self._left_open = [run for run in self._left_open if run.run_id != run_id]  # ended here, as its tag says
        for runs in (self._cell_runs or {}).values():
            runs[:] = [replace(run, status=status) if run.run_id == run_id else run for run in runs]

    def log_verdicts(self, verdicts: list[Verdict]) -> None:
        """Each verdict on the sweep's parent run: in words as a tag (the winner alone where one wins), the
        margin over the closest rival and its interval as metrics, keyed ``<gpu>/<dram>GiB/<jps>jps``."""
        from mlflow.entities import Metric, RunTag

        now, metrics, tags = int(time.time() * 1000), [], []
        for verdict in verdicts:
            outcome = verdict.label if verdict.significant else verdict.in_words()
            tags.append(RunTag(f"verdict/{verdict.where}", outcome))
            margins = {"margin_pct": verdict.margin_pct, "margin_lo_pct": verdict.margin_lo_pct,
                       "margin_hi_pct": verdict.margin_hi_pct}  # fmt: skip
            metrics += [Metric(f"{name}/{verdict.where}", value, now, 0)
                        for name, value in margins.items() if not math.isnan(value)]  # fmt: skip
        self._client.log_batch(self._parent_run_id, metrics=metrics, tags=tags)

    def log_parent_artifacts(self, directory: Path, artifact_path: str) -> None:
        self._client.log_artifacts(self._parent_run_id, str(directory), artifact_path)

    def log_parent_file(self, path: Path, artifact_path: str) -> None:
        self._client.log_artifact(self._parent_run_id, str(path), artifact_path)

    def close(self, complete: bool) -> None:
        self._client.set_tag(self._parent_run_id, "status", "complete" if complete else "partial")
        self._client.set_terminated(self._parent_run_id, "FINISHED")

    def _find_parent(self) -> str | None:
        parents = self._search("tags.kind = 'sweep'")
        return parents[0].info.run_id if parents else None

    def _create_parent(self, sweep_params: dict[str, str]) -> str:
        from mlflow.entities import Param

        run = self._client.create_run(self._experiment_id, tags={"kind": "sweep", "sweep": self._sweep}, run_name=self._sweep)
        self._client.log_batch(run.info.run_id, params=[Param(key, value[:6000]) for key, value in sweep_params.items()])
        return run.info.run_id

    def _search(self, filter_string: str) -> list:
        runs, token = [], None
        while True:
            page = self._client.search_runs([self._experiment_id], filter_string, max_results=1000, page_token=token)
            runs += list(page)
            token = page.token
            if not token:
                return runs


def retrying_client(tracking_uri: str, artifact_root: Path | None, patience_s: float) -> RetryingClient:
    from mlflow import MlflowClient

    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    local = tracking_uri.startswith(SQLITE_PREFIX)
    store_dir = Path(tracking_uri.removeprefix(SQLITE_PREFIX)).parent if local else artifact_root
    if local:
        _create_from_empty_store(Path(tracking_uri.removeprefix(SQLITE_PREFIX)))
    return RetryingClient(MlflowClient(tracking_uri), without_credentials(tracking_uri), store_dir, patience_s)


def _create_from_empty_store(path: Path) -> None:
    """A sqlite store that does not exist yet, created as a copy of an empty one: MLflow makes a new database by
    running its whole schema history (about a second of CPU), so the node keeps one so made per MLflow schema
    (``models.cache.cache_root``). The copy has MLflow's tables and no experiment; MLflow adds its default one on first
    use, as in a store it made. Where anything in that fails, MLflow makes the store itself."""
    if path.exists():
        return
    try:
        empty = _empty_store()
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(f".{path.name}.{os.getpid()}")
        shutil.copyfile(empty, staged)
        try:
            os.link(staged, path)  # never over a store another process made meanwhile
        except FileExistsError:
            pass
        finally:
            staged.unlink()
    except Exception:  # a private MLflow function changed, a cache that cannot be written: MLflow makes it
        return


def _empty_store() -> Path:
    """The node's empty store for this MLflow schema, made once (written aside and renamed: never half of one)."""
    from mlflow.store.db.utils import _get_latest_schema_revision, _initialize_tables, create_sqlalchemy_engine

    empty = cache_root() / "mlflow" / f"empty-{_get_latest_schema_revision()}.db"
    if not empty.exists():
        empty.parent.mkdir(parents=True, exist_ok=True)
        staged = empty.with_name(f".{empty.name}.{os.getpid()}")
        staged.unlink(missing_ok=True)
        engine = create_sqlalchemy_engine(SQLITE_PREFIX + str(staged))
        try:
            _initialize_tables(engine)
        finally:
            engine.dispose()
        os.replace(staged, empty)
    return empty


def cell_metrics(summary: CellSummary) -> list:
    """Scalars of the cell, and per-turn series indexed by turn number (the MLflow step)."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    scalars = summary.scalars()
    # The SLO and whether it was met are words: tags of the run (``records.row.attempt_tags``), not metrics.
    metrics = [Metric(key, float(value), now, 0) for key, value in scalars.items()
               if value is not None and not isinstance(value, str)]  # fmt: skip
    for turn in summary.turns:
        series = {
            "turn_latency_s": turn.latency_mean_s,
            "turn_ttft_s": turn.ttft_mean_s,
            "turn_prompt_tokens": turn.prompt_tokens_mean,
            "turn_cached_fraction": turn.cached_fraction,
            "turn_best_cached_fraction": turn.best_cached_fraction,
            "turn_cached_of_best": turn.cached_of_best,
        }
        metrics += [Metric(key, float(value), now, turn.turn) for key, value in series.items() if value is not None]
    return metrics
