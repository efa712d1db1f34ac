"""The layers of the project stack, and its pure core imports no process, HTTP, Ray or tracking code (house style 2).

The layers (``LAYERS``): every import, at import time, in a function or for type checking, points down a layer or
stays in its own, and no import circle links two layers. The pure core is checked twice: on the static graph of what
each project module imports when it is imported (statements at module level, ``if TYPE_CHECKING`` blocks left out),
which names the module that breaks the rule; and, for what only running the imports shows (a third-party package
importing a forbidden one), by importing every pure module in one fresh interpreter: a forbidden module loaded by any
of them would be loaded there."""

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
    *modules_of("orchestrator.cell"),
    *modules_of("orchestrator.sim"),
    *modules_of("orchestrator.records"),
    *modules_of("orchestrator.routing"),
    "orchestrator.evidence.budget",
    "orchestrator.evidence.held_out",
    "orchestrator.evidence.pack",
    "orchestrator.evidence.pressure",
    "orchestrator.evidence.tier",
    *modules_of("orchestrator.budget"),
    *modules_of("orchestrator.mechanisms"),
    *modules_of("orchestrator.mechanisms.continuum"),
    *modules_of("orchestrator.roofline"),
    "orchestrator.crossover.bisection",
    "orchestrator.capacity.plan",
    "orchestrator.replica.config",
    "orchestrator.policies.catalog",
    "orchestrator.policies.engine_setup",
    "orchestrator.workload.plan",
    "orchestrator.workload.schedule",
    "orchestrator.workload.distributions",
    "orchestrator.workload.traces.schema",
    "orchestrator.sizing.kv",
    "orchestrator.sizing.parallel",
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
    return _imported_in(module, at_import_only=True)


@cache
def every_import(module: str) -> frozenset[str]:
    """What ``module`` imports anywhere: at import time, inside a function or for type checking."""
    return _imported_in(module, at_import_only=False)


def _imported_in(module: str, at_import_only: bool) -> frozenset[str]:
    path = source_of(module)
    if path is None:
        return frozenset()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set(_with_parents(module)[:-1])
    tree = ast.parse(path.read_text())
    for node in _run_at_import(tree.body) if at_import_only else ast.walk(tree):
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
    below = ("orchestrator.records", "orchestrator.units", "orchestrator.paths", "orchestrator.inputs.validation")
    found = []
    for module in modules_of("orchestrator.records"):
        for node in ast.walk(ast.parse(source_of(module).read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [alias.name for alias in node.names]
                found += [f"{module}: {name}" for name in names if name.split(".")[0] in PROJECT_PACKAGES
                          and not name.startswith(below)]  # fmt: skip
    assert found == []


def layer_of(module: str) -> str:
    """The part of the project ``module`` belongs to: the longest name of ``LAYERS`` it is or lies under (a part of
    the sweep by its folder, so that a new one must be placed), or ``analysis``; else its package of ``orchestrator``,
    which no layer then holds."""
    parts = module.split(".")
    if parts[0] != "orchestrator":
        return parts[0]
    if parts[1:2] and parts[1] in CHECKOUT_SUBPACKAGES:
        return parts[1]
    in_a_part_of_the_sweep = parts[1:2] == ["sweep"] and len(parts) > 2
    if in_a_part_of_the_sweep and (PROJECT_ROOT / "orchestrator/sweep" / parts[2]).is_dir():
        return ".".join(parts[:3])
    placed = (".".join(parts[:end]) for end in range(len(parts), 1, -1))
    return next((name for name in placed if name in LAYER_NAMES), ".".join(parts[:2]))


LAYERS = (
    # the package itself, units, paths, the GPU catalogue, what users give (the command parser, one-line input errors)
    ("orchestrator", "orchestrator.units", "orchestrator.paths", "orchestrator.gpus", "orchestrator.inputs"),
    ("orchestrator.records",),  # the contract every stage hands on
    ("orchestrator.workload", "orchestrator.models", "orchestrator.sizing", "orchestrator.routing"),
    ("orchestrator.roofline",),  # what a step costs on a device
    ("orchestrator.mechanisms",),  # what policies are made of, Continuum among them, and the simulated request
    ("orchestrator.replica",),  # the engine configurations, the tested stacks and the processes that serve them
    ("orchestrator.policies",),  # the registered policies, and the engine a cell runs one with
    ("orchestrator.cell",),  # a cell as a value: its spec and key, its simulated engine's record, its cell.json
    ("orchestrator.sim",),
    ("orchestrator.budget",),  # a GPU budget, what a cell's device time costs, the order of measurement, spending
    ("orchestrator.sweep.cluster",),
    ("orchestrator.sweep.planning",),  # the spec, the grid's cells, their engines, preflight
    ("analysis",),  # the report and the verdicts, which the runtime publishes
    ("orchestrator.sweep.runtime",),
    ("orchestrator.capacity", "orchestrator.crossover"),  # searches run as sweeps
    ("orchestrator.evidence",),  # a node's checks, and the GPU evidence run that measures cells beside predictions
    # the commands (``orchestrator.doctor``: ``kvsweep doctor`` by its contract's name; ``orchestrator.sweep``: its package)
    ("orchestrator.cli", "orchestrator.doctor", "orchestrator.sweep", "sweeps"),
)  # fmt: skip
RANK = {layer: rank for rank, layers in enumerate(LAYERS) for layer in layers}
LAYER_NAMES = set(RANK)


def project_modules() -> list[str]:
    """Every module of the project, by the name it is imported as (``analysis`` and ``sweeps`` under
    ``orchestrator``)."""
    modules = []
    for package in ("orchestrator", *CHECKOUT_SUBPACKAGES):
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            parts = path.relative_to(PROJECT_ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules.append(module if package == "orchestrator" else f"orchestrator.{module}")
    return modules


def layer_imports(imports=every_import) -> dict[tuple[str, str], list[str]]:
    """(importing layer, imported layer) -> the imports that link them, across layers only. A package's
    ``__init__`` is left out as an imported module: importing it as a parent links no layers."""
    links: dict[tuple[str, str], list[str]] = {}
    for module in project_modules():
        for name in imports(module):
            source = source_of(name)
            if source is not None and source.name != "__init__.py" and layer_of(name) != layer_of(module):
                links.setdefault((layer_of(module), layer_of(name)), []).append(f"{module} -> {name}")
    return links


def upward(links: dict[tuple[str, str], list[str]]) -> list[str]:
    """The imports of ``links`` (``layer_imports``) from a layer to one above it."""
    return [link for (importer, imported), found in sorted(links.items()) if RANK[imported] > RANK[importer]
            for link in found]  # fmt: skip


def import_circles(imports=every_import) -> list[list[str]]:
    """The circles of the project's layers (``layer_of``) in what their modules import: each a list of layers that
    reach each other, empty when the layers stack."""
    edges: dict[str, set[str]] = {}
    for importer, imported in layer_imports(imports):
        edges.setdefault(importer, set()).add(imported)
    return circles_of(edges)


def module_circles(imports=every_import) -> list[list[str]]:
    """The circles of the project's modules in what they import, inside a layer too: each a list of modules that
    reach each other (a package's ``__init__`` left out as an imported module, as in ``layer_imports``)."""
    edges = {module: {name for name in imports(module) if (source := source_of(name)) and source.name != "__init__.py"}
             for module in project_modules()}  # fmt: skip
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
    them: a circle (planning -> sim -> planning) makes every module of it load with any one of them, and one through
    a type-checking import still means neither can be read without the other."""
    assert import_circles() == []


def test_no_two_modules_import_each_other_even_in_one_layer():
    """Within a layer as across them: modules that import each other (the simulation's loop and its events, through
    type-checking imports) cannot be read, or changed, one without the other."""
    assert module_circles() == []


def test_every_part_of_the_project_has_a_layer():
    """A new package or top-level module is placed in ``LAYERS`` (and docs/architecture.md) before it can pass."""
    assert sorted({layer_of(module) for module in project_modules()} - set(RANK)) == []


def test_no_import_points_up_a_layer():
    assert upward(layer_imports()) == []


def test_no_package_init_imports_anything_but_orchestrator_paths():
    """The layer checks leave an imported ``__init__`` out (importing a package as a parent links no layers), which
    holds only while no ``__init__`` imports anything; the project's own reads where the checkout keeps its
    subpackages."""
    importing = {}
    for module in project_modules():
        if source_of(module).name == "__init__.py":
            found = sorted(every_import(module) - set(_with_parents(module)))
            importing.update({module: found} if found else {})
    assert importing == {"orchestrator": ["orchestrator.paths"]}


def test_the_circle_check_sees_a_circle_of_layers():
    assert layer_of("orchestrator.sweep.planning.cells") == "orchestrator.sweep.planning"
    assert layer_of("orchestrator.sim.engine") == "orchestrator.sim"
    assert layer_of("orchestrator.analysis.report") == "analysis"
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"d"}}
    assert circles_of(edges) == [["a", "b", "c"]]
    assert circles_of({"a": {"b"}, "b": {"c"}, "d": {"a"}}) == []


def test_the_layer_check_sees_an_import_up_a_layer_and_none_down():
    links = {("orchestrator.mechanisms", "orchestrator.sim"): ["orchestrator.mechanisms.x -> orchestrator.sim.y"],
             ("orchestrator.sim", "orchestrator.mechanisms"): ["orchestrator.sim.y -> orchestrator.mechanisms.x"]}
    assert upward(links) == ["orchestrator.mechanisms.x -> orchestrator.sim.y"]


def test_a_lazy_import_in_a_function_or_for_type_checking_is_not_an_import_at_import_time():
    # An ordering names the simulated request for type checking only: not imported at import time, and still an
    # import for the layers.
    assert "orchestrator.mechanisms.request" not in direct_imports("orchestrator.mechanisms.ordering")
    assert "orchestrator.mechanisms.request" in every_import("orchestrator.mechanisms.ordering")
    assert "ray" not in imported_by("orchestrator.sweep.cluster.connect")  # it imports Ray when it connects


# A class longer than this does several things; a function longer than this, several steps a name should say.
MAX_CLASS_LINES, MAX_FUNCTION_LINES = 200, 60
# The values every layer reads (units, paths, the GPU catalogue) and the doctor by its contract's name.
MAX_LOOSE_MODULES = 4


def oversized(tree: ast.Module) -> list[str]:
    """The classes and functions of ``tree`` longer than the house allows, each as ``kind name lines``."""
    found = []
    for node in ast.walk(tree):
        limit = {ast.ClassDef: MAX_CLASS_LINES, ast.FunctionDef: MAX_FUNCTION_LINES,
                 ast.AsyncFunctionDef: MAX_FUNCTION_LINES}.get(type(node))  # fmt: skip
        if limit is not None and (lines := node.end_lineno - node.lineno + 1) > limit:
            found.append(f"{type(node).__name__} {node.name} {lines}")
    return found


def test_no_class_is_over_200_lines_and_no_function_over_60():
    found = {module: sizes for module in project_modules()
             if (sizes := oversized(ast.parse(source_of(module).read_text())))}  # fmt: skip
    assert found == {}


def test_the_size_check_sees_a_long_class_and_a_long_function():
    body = "\n".join(f"    x{index} = {index}" for index in range(MAX_FUNCTION_LINES))
    assert oversized(ast.parse(f"def f():\n{body}\n")) == [f"FunctionDef f {MAX_FUNCTION_LINES + 1}"]
    methods = "\n".join(f"    def m{index}(self):\n        return {index}" for index in range(MAX_CLASS_LINES // 2))
    assert oversized(ast.parse(f"class C:\n{methods}\n")) == [f"ClassDef C {MAX_CLASS_LINES + 1}"]


def test_at_most_four_loose_modules_stand_at_the_top_of_the_package():
    """Commands live in ``orchestrator/cli``, everything else in the package of its layer."""
    loose = sorted(path.name for path in (PROJECT_ROOT / "orchestrator").glob("*.py") if path.name != "__init__.py")
    assert len(loose) <= MAX_LOOSE_MODULES, loose
