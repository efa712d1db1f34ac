"""Whether this node's disk holds what a tier fills (a tier's ``disk_need``), read on the node."""

from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.units import GIB


def disk_refusal(path: str, gib: float) -> str | None:
    """Why a replica whose tier fills ``gib`` GiB under the folder ``path`` must not start here (one line), or None
    when the disk holds it. The folder may not exist yet: the free space is that of the nearest one above it."""
    folder = Path(path)
    while not folder.exists():
        folder = folder.parent
    free_gib = shutil.disk_usage(folder).free / GIB
    if free_gib >= gib:
        return None
    return (f"the tier fills {gib:g} GiB of local disk under {path}, and {folder} has {free_gib:.1f} GiB "
            "free: give the node more disk there, or the cell a smaller DRAM budget")
