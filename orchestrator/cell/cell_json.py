"""A cell's ``cell.json`` read back whole: the effective side as ``records`` types, the requested side as the types
that asked for it (the cell's spec, the replica's or the simulated engine's configuration).

It sits above them all, so ``records`` imports none of them.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import TypeAdapter

from orchestrator.cell.sim_config import SimEngineConfig
from orchestrator.cell.spec import CellSpec
from orchestrator.records.cell import CellConfig
from orchestrator.replica.config import EngineConfig

_ENGINE = TypeAdapter(EngineConfig | SimEngineConfig)


def read_requested(cell: dict, engine: dict | None) -> tuple[CellSpec, EngineConfig | SimEngineConfig | None]:
    return CellSpec.model_validate(cell), None if engine is None else _ENGINE.validate_python(engine)


def cell_config(payload: dict) -> CellConfig:
    """The configuration a ``cell.json`` holds."""
    return CellConfig.from_json(payload, read_requested)


def read_cell_json(path: Path) -> CellConfig:
    return cell_config(json.loads(path.read_text()))
