"""Where generated model directories live, and how one is built without ever leaving half of it behind."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_root() -> Path:
    """What the project keeps on a node between runs (``KVSWEEP_CACHE``, by default ``~/.cache/kvsweep``)."""
    return Path(os.environ.get("KVSWEEP_CACHE") or Path.home() / ".cache" / "kvsweep")


def default_cache_dir() -> Path:
    return cache_root() / "models"


def build_once(target: Path, complete_marker: str, build: Callable[[Path], None]) -> Path:
    """``target``, built by ``build(directory)`` first if ``target/complete_marker`` is not there yet.

    The build writes into a temporary sibling that is renamed into place, so a concurrent or interrupted
    build never leaves a half-written directory behind; the marker is a file the build writes last.
    """
    if (target / complete_marker).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        build(staging)
        try:
            staging.rename(target)
        except OSError:  # another process finished first
            if not (target / complete_marker).exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
