"""The faults that stop a sweep rather than a cell: the tracking store not answering past the sweep's patience,
and a full disk under the results or the tracking store. Each is one line for the user, with what to do; the
driver stops on either with every finished cell complete on disk, and a re-run of the same command goes on.
"""

from __future__ import annotations

import errno
import shutil
from contextlib import contextmanager
from pathlib import Path

from orchestrator.inputs.validation import first_line

# What "the disk is full" looks like from the operating system (a quota counts) and from sqlite.
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_SQLITE_FULL = "database or disk is full"


class SweepStopped(Exception):
    """A fault no cell can get past; ``remedy`` says what a user does before the re-run."""

    remedy = "re-run the same command"


class TrackingUnavailable(SweepStopped):
    remedy = ("re-run the same command once it answers: the cells finished on disk are logged to MLflow then, "
              "not run again")  # fmt: skip

    def __init__(self, where: str, waited_s: float, tries: int, error: BaseException):
        super().__init__(f"the tracking store at {where} did not answer for {waited_s:.0f} s ({tries} tries, "
                         f"--tracking-patience-s): {first_line(error)}")  # fmt: skip


class DiskFull(SweepStopped):
    remedy = "free space there and re-run the same command: it runs only the cells not done"

    def __init__(self, directory: Path, doing: str, error: BaseException):
        super().__init__(f"the disk holding {directory} is full ({_free(directory)} free) while {doing}: "
                         f"{first_line(error)}")  # fmt: skip


def is_disk_full(error: BaseException) -> bool:
    """An OS write that found no space, or sqlite saying so (wrapped by SQLAlchemy and MLflow, its words kept)."""
    if isinstance(error, OSError) and error.errno in _FULL_ERRNOS:
        return True
    return _SQLITE_FULL in str(error)


@contextmanager
def stop_if_disk_full(directory: Path, doing: str):
    """Turns a full disk met inside the block into ``DiskFull``; any other error passes."""
    try:
        yield
    except Exception as error:
        if is_disk_full(error):
            raise DiskFull(directory, doing, error) from error
        raise


def _free(directory: Path) -> str:
    for path in (Path(directory), *Path(directory).parents):
        if path.exists():
            return f"{shutil.disk_usage(path).free / 2**20:.1f} MiB"
    return "unknown"
