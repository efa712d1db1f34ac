"""The pure core imports no process, HTTP, Ray or tracking code (house style 2), checked in a fresh interpreter
per module so that what another test imported cannot hide a violation."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchestrator.paths import PROJECT_ROOT

PURE_MODULES = (
    "orchestrator.sweep.spec",
    "orchestrator.sweep.cells",
    "orchestrator.sweep.serving",
    "orchestrator.replica.config",
    "orchestrator.policies",
    "orchestrator.sim.config",
    "orchestrator.sim.engine",
    "orchestrator.sim.scheduler",
    "orchestrator.workload.plan",
    "orchestrator.workload.schedule",
    "orchestrator.workload.distributions",
    "orchestrator.workload.traces.schema",
    "orchestrator.records.pins",
    "orchestrator.sizing.kv",
    "orchestrator.records.summary",
    "orchestrator.records.schema",
    "orchestrator.records.cell",
    "orchestrator.records.row",
    "orchestrator.records.layout",
    "orchestrator.records.trace",
    "orchestrator.replica.schedulers.continuum_rules",
    "orchestrator.replica.schedulers.pins",
)
# Ray, HTTP, tracking, the engine, and the modules that start and talk to server processes.
FORBIDDEN = ("ray", "aiohttp", "mlflow", "vllm", "orchestrator.replica.server", "orchestrator.replica.replica")


def imported_by(module: str) -> set[str]:
    """Every module loaded by importing ``module`` alone in a new interpreter."""
    script = f"import importlib, json, sys; importlib.import_module({module!r}); print(json.dumps(list(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


@pytest.mark.parametrize("module", PURE_MODULES)
def test_a_pure_module_imports_no_process_http_ray_or_tracking_code(module):
    modules = imported_by(module)
    assert module in modules
    assert sorted(set(FORBIDDEN) & modules) == []


def test_the_check_sees_a_forbidden_import():
    assert "orchestrator.replica.server" in imported_by("orchestrator.replica.vllm_server")
