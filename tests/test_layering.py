"""The pure core imports no process, HTTP, Ray or tracking code (house style 2).

Checked twice: on the static graph of what each project module imports when it is imported (statements at
module level, ``if TYPE_CHECKING`` blocks left out), which names the module that breaks the rule; and, for what
only running the imports shows (a third-party package importing a forbidden one), by importing every pure module
in one fresh interpreter: a forbidden module loaded by any of them would be loaded there."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from orchestrator.paths import CHECKOUT_SUBPACKAGES, PROJECT_ROOT

PROJECT_PACKAGES = ("orchestrator",)


def modules_of(package: str) -> tuple[str, ...]:
    folder = PROJECT_ROOT / package.replace(".", "/")
    return tuple(f"{package}.{path.stem}" for path in sorted(folder.glob("*.py")) if path.stem != "__init__")


# Whole packages (every module, present and future) and single modules of the pure core.
PURE_MODULES = (
    *modules_of("orchestrator.sweep.planning"),
    *modules_of("orchestrator.sim"),
    *modules_of("orchestrator.records"),
    *modules_of("orchestrator.routing"),
    *modules_of("orchestrator.evidence"),
    *modules_of("orchestrator.budget"),
    *modules_of("orchestrator.mechanisms"),
    "orchestrator.crossover.bisection",
    "orchestrator.capacity.plan",
    "orchestrator.replica.config",
    "orchestrator.policies",
    "orchestrator.engine_setup",
    "orchestrator.workload.plan",
    "orchestrator.workload.schedule",
    "orchestrator.workload.distributions",
    "orchestrator.workload.traces.schema",
    "orchestrator.sizing.kv",
    "orchestrator.sizing.parallel",
    "orchestrator.replica.schedulers.continuum_rules",
    "orchestrator.replica.schedulers.pins",
)
# Ray, HTTP, tracking, the engine, and the modules that start and talk to server processes.
FORBIDDEN = ("ray", "aiohttp", "mlflow", "vllm", "orchestrator.replica.server", "orchestrator.replica.replica")


def source_of(module: str) -> Path | None:
    """The file of a project module or package, None for anything else."""
    if module.split(".")[0] not in PROJECT_PACKAGES:
        return None
    parts = module.split(".")
    if parts[1:2] and parts[1] in CHECKOUT_SUBPACKAGES:  # orchestrator.analysis is analysis/ in the checkout
        parts = parts[1:]
    base = PROJECT_ROOT.joinpath(*parts)
    return next((path for path in (base.with_suffix(".py"), base / "__init__.py") if path.exists()), None)


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name | ast.Attribute) and ast.unparse(node.test).endswith("TYPE_CHECKING")


def _run_at_import(body: list[ast.stmt]):
    """The statements of ``body`` that run when the module is imported: not in functions, nor under
    ``if TYPE_CHECKING``."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from _run_at_import(node.orelse)
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            nested = getattr(node, field, None)
            if isinstance(nested, list):
                yield from _run_at_import([item for item in nested if isinstance(item, ast.stmt | ast.excepthandler)])


def _with_parents(module: str) -> list[str]:
    """Importing ``a.b.c`` imports ``a`` and ``a.b`` first."""
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


@cache
def direct_imports(module: str) -> frozenset[str]:
    """What importing ``module`` imports itself (its parent packages included)."""
    path = source_of(module)
    if path is None:
        return frozenset()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set(_with_parents(module)[:-1])
    for node in _run_at_import(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Import):
            found.update(name for alias in node.names for name in _with_parents(alias.name))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.update(_with_parents(base))
            # ``from package import name`` imports the submodule ``package.name`` where there is one.
            found.update(f"{base}.{alias.name}" for alias in node.names if source_of(f"{base}.{alias.name}"))
    found.discard(module)
    return frozenset(found)


def imported_by(module: str) -> set[str]:
    """Every module importing ``module`` imports, through the project's modules (third-party packages are named,
    not followed)."""
    seen, pending = {module}, [module]
    while pending:
        for name in direct_imports(pending.pop()) - seen:
            seen.add(name)
            pending.append(name)
    return seen


def forbidden_in(modules: set[str]) -> list[str]:
    return sorted(name for name in modules if any(name == bad or name.startswith(f"{bad}.") for bad in FORBIDDEN))


@pytest.mark.parametrize("module", PURE_MODULES)
def test_a_pure_module_imports_no_process_http_ray_or_tracking_code(module):
    assert source_of(module) is not None
    assert forbidden_in(imported_by(module)) == []


def test_importing_every_pure_module_in_a_fresh_interpreter_loads_nothing_forbidden():
    """A fresh interpreter: what another test imported cannot hide a violation."""
    script = ("import importlib, json, sys\n"
              f"for module in {list(PURE_MODULES)!r}: importlib.import_module(module)\n"
              "print(json.dumps(list(sys.modules)))")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    loaded = set(json.loads(result.stdout))
    assert set(PURE_MODULES) <= loaded
    assert forbidden_in(loaded) == []


def test_the_pure_packages_are_found_module_by_module():
    assert {"orchestrator.sweep.planning.spec", "orchestrator.sweep.planning.cells", "orchestrator.sim.engine",
            "orchestrator.records.verdict", "orchestrator.routing.rules"} <= set(PURE_MODULES)  # fmt: skip


def test_the_check_sees_a_forbidden_import_directly_and_through_other_modules():
    assert "orchestrator.replica.server" in direct_imports("orchestrator.replica.vllm_server")
    assert forbidden_in(imported_by("orchestrator.replica.replica")) != []
    # The driver starts no server itself; the worker it imports does.
    assert "orchestrator.replica.server" not in direct_imports("orchestrator.sweep.runtime.driver")
    assert "orchestrator.replica.server" in imported_by("orchestrator.sweep.runtime.driver")


def test_records_import_nothing_of_the_stages_above_them_not_even_lazily():
    """``records/`` is the contract every stage imports: an import of a stage from it, at import time, inside a
    function or for type checking, would close a circle (records -> sim -> records). What records read of a cell is
    a protocol of their own (``records.cell.RequestedCell``)."""
    below = ("orchestrator.records", "orchestrator.units", "orchestrator.paths", "orchestrator.validation")
    found = []
    for module in modules_of("orchestrator.records"):
        for node in ast.walk(ast.parse(source_of(module).read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [alias.name for alias in node.names]
                found += [f"{module}: {name}" for name in names if name.split(".")[0] in PROJECT_PACKAGES
                          and not name.startswith(below)]  # fmt: skip
    assert found == []


def layer_of(module: str) -> str:
    """The part of the project ``module`` belongs to: a package of ``orchestrator`` (the sweep's planning, cluster and
    runtime apart), a top-level module of it, or ``analysis``."""
    parts = module.split(".")
    if parts[0] != "orchestrator":
        return parts[0]
    if parts[1:2] and parts[1] in CHECKOUT_SUBPACKAGES:
        return parts[1]
    in_a_part_of_the_sweep = parts[1:2] == ["sweep"] and len(parts) > 2
    if in_a_part_of_the_sweep and (PROJECT_ROOT / "orchestrator/sweep" / parts[2]).is_dir():
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def import_circles() -> list[list[str]]:
    """The circles of the project's layers (``layer_of``) in what their modules import when imported: each a list of
    layers that reach each other, empty when the layers stack. A package's ``__init__`` imports nothing here, so
    importing it as a parent links no layers."""
    edges: dict[str, set[str]] = {}
    for package in ("orchestrator", "analysis"):
        for path in (PROJECT_ROOT / package).rglob("*.py"):
            parts = path.relative_to(PROJECT_ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            module = module if package == "orchestrator" else f"orchestrator.{module}"
            for name in direct_imports(module):
                source = source_of(name)
                if source is not None and source.name != "__init__.py" and layer_of(name) != layer_of(module):
                    edges.setdefault(layer_of(module), set()).add(layer_of(name))
    return circles_of(edges)


def circles_of(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of nodes of ``edges`` (node -> the nodes it imports) that reach each other."""
    circles, reached = [], {layer: _reachable(layer, edges) for layer in edges}
    for layer in sorted(edges):
        circle = sorted(other for other in reached[layer] if layer in reached.get(other, ()))
        if circle and circle not in circles:
            circles.append(circle)
    return circles


def _reachable(start: str, edges: dict[str, set[str]]) -> set[str]:
    seen, pending = set(), [start]
    while pending:
        for name in edges.get(pending.pop(), ()):
            if name not in seen:
                seen.add(name)
                pending.append(name)
    return seen


def test_the_layers_stack_with_no_import_circle():
    """Planning, the simulator, the mechanisms, records, the runtime and the report each import only layers below
    them: a circle (planning -> sim -> planning) makes every module of it load with any one of them."""
    assert import_circles() == []


def test_the_circle_check_sees_a_circle_of_layers():
    assert layer_of("orchestrator.sweep.planning.cells") == "orchestrator.sweep.planning"
    assert layer_of("orchestrator.sim.engine") == "orchestrator.sim"
    assert layer_of("orchestrator.analysis.report") == "analysis"
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"d"}}
    assert circles_of(edges) == [["a", "b", "c"]]
    assert circles_of({"a": {"b"}, "b": {"c"}, "d": {"a"}}) == []


def test_a_lazy_import_in_a_function_or_for_type_checking_is_not_an_import_at_import_time():
    # An ordering names the simulator's request for type checking only, as vLLM's connectors name its Request.
    assert "orchestrator.sim.scheduler" not in direct_imports("orchestrator.mechanisms.ordering")
    assert "ray" not in imported_by("orchestrator.sweep.cluster.connect")  # it imports Ray when it connects
