"""The pure core imports no process, HTTP, Ray or tracking code (house style 2), checked in a fresh interpreter
per module so that what another test imported cannot hide a violation."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchestrator.paths import PROJECT_ROOT


def modules_of(package: str) -> tuple[str, ...]:
    folder = PROJECT_ROOT / package.replace(".", "/")
    return tuple(f"{package}.{path.stem}" for path in sorted(folder.glob("*.py")) if path.stem != "__init__")


# Whole packages (every module, present and future) and single modules of the pure core.
PURE_MODULES = (
    *modules_of("orchestrator.sweep.planning"),
    *modules_of("orchestrator.sim"),
    *modules_of("orchestrator.records"),
    *modules_of("orchestrator.routing"),
    "orchestrator.crossover.bisection",
    "orchestrator.replica.config",
    "orchestrator.policies",
    "orchestrator.workload.plan",
    "orchestrator.workload.schedule",
    "orchestrator.workload.distributions",
    "orchestrator.workload.traces.schema",
    "orchestrator.sizing.kv",
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


def test_the_pure_packages_are_found_module_by_module():
    assert {"orchestrator.sweep.planning.spec", "orchestrator.sweep.planning.cells", "orchestrator.sim.engine",
            "orchestrator.records.verdict", "orchestrator.routing.rules"} <= set(PURE_MODULES)  # fmt: skip


def test_the_check_sees_a_forbidden_import():
    assert "orchestrator.replica.server" in imported_by("orchestrator.replica.vllm_server")
