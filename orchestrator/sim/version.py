"""Which simulator made a prediction: the project's version and a hash of every file the simulator's numbers come
from (its calibration, the GPUs' measured rates, its own error bands, the GPU catalogue). Two predictions with one
version came from the same simulator; a refit or recalibration changes it."""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path

from orchestrator.sim.error_bands import SIM_ERROR_FILE
from orchestrator.sim.hardware import CALIBRATION_FILE
from orchestrator.sim.rates import RATES_FILE

GPUS_FILE = Path(__file__).parents[1] / "data" / "gpus.toml"


def sim_version() -> str:
    digest = hashlib.sha256()
    for path in (CALIBRATION_FILE, RATES_FILE, SIM_ERROR_FILE, GPUS_FILE):
        digest.update(path.read_bytes())
    try:
        release = importlib.metadata.version("kvsweep")
    except importlib.metadata.PackageNotFoundError:
        release = "unreleased"
    return f"kvsweep {release}, simulator data {digest.hexdigest()[:12]}"
