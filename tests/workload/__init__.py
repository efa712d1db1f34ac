"""Tests of the workload: specs, schedules, plans, traces and the load generator."""

from pathlib import Path

DATA = Path(__file__).parent / "data"  # hand-made sample files
