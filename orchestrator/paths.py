"""Locations the project needs at run time."""

from pathlib import Path

# The project root: put on PYTHONPATH of child processes (vLLM's engine process imports our scheduler
# classes by name, and the reaper runs as ``-m orchestrator.replica.reaper``).
PROJECT_ROOT = Path(__file__).resolve().parents[1]
