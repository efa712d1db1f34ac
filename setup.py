"""The package's layout, which pyproject.toml cannot state: ``analysis/`` and ``sweeps/`` sit at the checkout's top
and install as ``orchestrator.analysis`` and ``orchestrator.sweeps`` (``orchestrator/__init__.py`` says why; its
``orchestrator.paths.CHECKOUT_SUBPACKAGES`` names the same two, read here without importing the project)."""

from setuptools import find_namespace_packages, setup

CHECKOUT_SUBPACKAGES = ("analysis", "sweeps")

setup(
    packages=[*find_namespace_packages(include=["orchestrator", "orchestrator.*"], exclude=["*.__pycache__"]),
              *(f"orchestrator.{name}" for name in CHECKOUT_SUBPACKAGES)],  # fmt: skip
    package_dir={f"orchestrator.{name}": name for name in CHECKOUT_SUBPACKAGES},
)
