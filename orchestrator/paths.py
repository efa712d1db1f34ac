"""Locations the project needs at run time."""

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

# The project root: put on PYTHONPATH of child processes (vLLM's engine process imports our scheduler
# classes by name, and the reaper runs as ``-m orchestrator.replica.reaper``).
PROJECT_ROOT = Path(__file__).resolve().parents[1]
# Subpackages of ``orchestrator`` that a checkout keeps at its top (``orchestrator/__init__.py``).
CHECKOUT_SUBPACKAGES = ("analysis", "sweeps")


def with_project_on_path(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the project root first on ``PYTHONPATH``, for a child that runs the project's modules by name."""
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, (str(PROJECT_ROOT), env.get("PYTHONPATH"))))}


def sweeps_dir() -> Path:
    """Where the shipped sweeps are: ``sweeps/`` in a checkout, ``orchestrator/sweeps/`` in an installed wheel."""
    return Path(importlib.util.find_spec("orchestrator.sweeps").submodule_search_locations[0])
