"""A cell's ``cell.json`` read back whole: the effective side as ``records`` types, the requested side as the types
of the stages that asked for it (planning's cell spec, the replica's or the simulator's engine configuration).

It sits above those stages, so ``records`` imports none of them.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import TypeAdapter

from orchestrator.records.cell import CellConfig
from orchestrator.replica.config import EngineConfig
from orchestrator.sim.engine import SimEngineConfig
from orchestrator.sweep.planning.cells import CellSpec

_ENGINE = TypeAdapter(EngineConfig | SimEngineConfig)


def read_requested(cell: dict, engine: dict | None) -> tuple[CellSpec, EngineConfig | SimEngineConfig | None]:
    return CellSpec.model_validate(cell), None if engine is None else _ENGINE.validate_python(engine)


def cell_config(payload: dict) -> CellConfig:
    """The configuration a ``cell.json`` holds."""
    return CellConfig.from_json(payload, read_requested)


def read_cell_json(path: Path) -> CellConfig:
    return cell_config(json.loads(path.read_text()))
