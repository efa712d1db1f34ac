"""The simulator's engine stacks: one calibration per serving stack, each with what it was fitted on and its own error
bands, registered by name (reading the package's data files only).

- ``source-study``: ``calibration.toml``, fitted on the source study's published H200 runs of an older vLLM
  (``sim.calibrate``), with ``sim_error.toml``'s bands (``error_bands``): the simulator as it was before stacks.
- every ``fitted_stacks/<name>.toml``: a stack fitted on this project's own GPU cells by ``kvsweep calibrate --stack
  NAME RUN_DIR...`` (``stack_fit``), never by hand. Its ``[stack]`` table says which runs, GPU types and cells it was
  fitted on and the command; ``[calibration]`` holds its constants, each with its source; ``[held_out]`` each policy's
  RMS error of mean JCT on runs left out of the fit.

A fitted stack's band for a policy is its held-out error; a policy its runs never measured takes the largest of them.
A GPU type its runs measured adds nothing to that (the held-out runs were on it); any other type runs the stack's
software constants with its own rates (``roofline.rates``) and adds the roofline's error against that type's published
figures (``sim_error.toml``'s ``public_figures``), or the largest of them for a type nothing published checks.

The default is the newest stack with GPU measurements behind it, so that a sweep's simulated cells predict what
today's engine would measure.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.cell.spec import SOURCE_STUDY
from orchestrator.roofline.hardware import CALIBRATION_FILE, Calibration
from orchestrator.sim.error_bands import GPU_SOURCE, SIM_ERROR_FILE, SimErrors, load_error_tables, load_errors

DEFAULT_STACK = "vllm-0.26"
STACKS_DIR = Path(__file__).parent / "fitted_stacks"
STACK_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]*$")


@dataclass(frozen=True)
class SimStack:
    """One engine stack: its constants' file (for the source study, the roofline's ``calibration.toml``, whose bands
    are ``sim_error.toml``'s)."""

    name: str
    path: Path

    @property
    def is_source_study(self) -> bool:
        return self.name == SOURCE_STUDY

    @property
    def files(self) -> tuple[Path, ...]:
        """Every file its numbers come from besides the GPUs' own data: its constants, then the error tables."""
        return self.path, SIM_ERROR_FILE

    def calibration(self) -> Calibration:
        return Calibration.load(self.path)

    def _document(self) -> dict:
        return tomllib.loads(self.path.read_text())

    def errors(self) -> SimErrors:
        """The bands a simulated verdict of this stack must clear (the module's docstring)."""
        if self.is_source_study:
            return load_errors()
        document = self._document()
        measured = document["stack"]["gpus"]
        published = load_error_tables().get(GPU_SOURCE, {})
        gpus = dict.fromkeys(measured, 0.0) | {gpu: float(error) for gpu, error in published.items()
                                               if gpu not in measured}  # fmt: skip
        return SimErrors({policy: float(error) for policy, error in document["held_out"].items()}, gpus)

    def fitted_on(self) -> str:
        """What it was fitted on, in words."""
        if self.is_source_study:
            return "the source study's published H200 runs (orchestrator/sim/measured/)"
        stack = self._document()["stack"]
        return (f"{stack['num_cells']} GPU cells of {len(stack['runs'])} runs on {', '.join(stack['gpus'])} "
                f"({', '.join(stack['runs'])}), by `{stack['command']}`")  # fmt: skip


def stack_calibration(name: str | None) -> Calibration | None:
    """The calibration of the stack ``name``; None (the simulator's default, the source study's) for None."""
    return None if name is None else get_stack(name).calibration()


def stacks_errors(names: Iterable[str | None]) -> SimErrors:
    """The bands that simulated cells of the stacks ``names`` must clear (None: a cell from before stacks, the source
    study's): each policy's and GPU type's largest among them; the default stack's where there are none."""
    tables = [get_stack(name or SOURCE_STUDY).errors() for name in sorted(set(names), key=str)] or \
        [get_stack(DEFAULT_STACK).errors()]  # fmt: skip
    if len(tables) == 1:
        return tables[0]
    policies = {policy for table in tables for policy in table.policies}
    gpus = {gpu for table in tables for gpu in table.gpus}
    return SimErrors({policy: max(table.policy_error(policy) for table in tables) for policy in policies},
                     {gpu: max(table.gpu_error(gpu) for table in tables) for gpu in gpus})  # fmt: skip


def stack_names() -> list[str]:
    """Every stack, the source study's first."""
    return [SOURCE_STUDY, *sorted(path.stem for path in STACKS_DIR.glob("*.toml"))]


def get_stack(name: str) -> SimStack:
    """The stack called ``name``; raises ``ValueError`` (one line, listing the valid names) for any other."""
    if name == SOURCE_STUDY:
        return SimStack(SOURCE_STUDY, CALIBRATION_FILE)
    path = stack_path(name)
    if not STACK_NAME.match(name) or not path.is_file():
        raise ValueError(f"unknown simulator stack {name!r}; valid: {', '.join(stack_names())}")
    return SimStack(name, path)


def check_new_name(name: str) -> None:
    """Raises ``ValueError`` (one line) unless a fit may write the stack ``name``: not the source study's (fitted on its
    own files), and a plain name (lower-case letters, digits, dots and dashes, e.g. vllm-0.32)."""
    if name == SOURCE_STUDY:
        raise ValueError(f"--stack {SOURCE_STUDY} is fitted on the source study's files, not on GPU runs (`kvsweep "
                         "calibrate --fit`); valid with RUN_DIRs: a stack named like vllm-0.26")  # fmt: skip
    if not STACK_NAME.match(name):
        raise ValueError(f"--stack {name!r}: a stack's name is lower-case letters, digits, dots and dashes "
                         "(e.g. vllm-0.32)")  # fmt: skip


def stack_path(name: str) -> Path:
    """Where a fit writes the stack ``name``."""
    return STACKS_DIR / f"{name}.toml"
