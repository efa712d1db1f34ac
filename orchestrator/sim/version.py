"""Which simulator made a prediction: the project's version, the engine stack it simulated with (``stacks.py``) and a
hash of every file the simulator's numbers come from (the stack's calibration, its error bands, the GPUs' measured
rates, the GPU catalogue). Two predictions with one version came from the same simulator; a refit, a recalibration or
another stack changes it, and so does any edit of those files' bytes, comments included: the predictions committed
before a GPU runs them name their version, so a file moved or a comment reworded would make them read as another
simulator's."""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path

from orchestrator.roofline.rates import RATES_FILE
from orchestrator.sim.stacks import get_stack

GPUS_FILE = Path(__file__).parents[1] / "data" / "gpus.toml"


def sim_version(stack: str) -> str:
    """The version of the simulator with the engine stack ``stack``."""
    constants, errors = get_stack(stack).files
    digest = hashlib.sha256()
    for path in (constants, RATES_FILE, errors, GPUS_FILE):
        digest.update(path.read_bytes())
    try:
        release = importlib.metadata.version("kvsweep")
    except importlib.metadata.PackageNotFoundError:
        release = "unreleased"
    return f"kvsweep {release}, simulator {stack} data {digest.hexdigest()[:12]}"
