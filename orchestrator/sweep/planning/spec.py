"""A sweep: the grid of cells to measure, with its model, workload, engine options and run limits.

Typed and frozen; every field is checked on construction, so a bad GPU name, policy or load level is
one clear line before Ray or MLflow is touched. Expanding the grid into cells is ``planning.cells``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from orchestrator.cell.spec import EngineKind
from orchestrator.gpus import CPU, known_device_names
from orchestrator.models.arch import load_model
from orchestrator.models.catalog import shipped_name
from orchestrator.models.dummy import source_config
from orchestrator.models.served import Weights
from orchestrator.models.tiny import TINY_MODEL
from orchestrator.policies.catalog import POLICIES, get_policy
from orchestrator.policies.engine_setup import EngineOptions
from orchestrator.roofline.hardware import CpuProfile, check_simulable
from orchestrator.routing.rules import RouterKind
from orchestrator.sim.stacks import DEFAULT_STACK, get_stack
from orchestrator.sizing.parallel import TP_DEGREES, default_tp, holding_degrees, tp_problem
from orchestrator.workload.spec import WorkloadSpec, check_jobs_per_cell


class RunLimits(BaseModel):
    """How long anything may take, and how often a crashed cell is retried. Not part of a cell's key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(2, ge=1, description="Attempts per cell per run when the replica crashes.")
    cell_timeout_s: float | None = Field(None, gt=0, description="Whole-cell limit; None: start + window + job timeout.")
    hang_timeout_s: float = Field(180.0, gt=0, description="No engine progress this long with requests in flight: hung.")
    health_timeout_s: float = Field(900.0, gt=0, description="Server start limit (model load, compile).")
    start_stall_s: float = Field(300.0, gt=0, description="A starting server with no log output, CPU or I/O this long: hung.")
    client_actors: int = Field(1, ge=0, description="Load-generator actors per cell on the replica's node; 0: in the worker.")
    poll_s: float = Field(1.0, gt=0, description="How often a worker checks its replica and load.")

    def cell_limit_s(self, workload: WorkloadSpec) -> float:
        if self.cell_timeout_s is not None:
            return self.cell_timeout_s
        return self.health_timeout_s + workload.arrival_window_s + workload.job_timeout_s


def trial_seed(base_seed: int, trial: int) -> int:
    """The seed of ``trial`` (0 is the base seed itself, so a cell of one trial keeps its key): fixed by the
    base seed alone, so that every policy of a trial sees the same schedule and a re-run finds the same cells."""
    if trial == 0:
        return base_seed
    return int.from_bytes(hashlib.sha256(f"{base_seed}:trial{trial}".encode()).digest()[:4], "big")


class SweepSpec(BaseModel):
    """The grid ``gpus x policies x jps x dram_gb x seeds x trials``. The DRAM axis can differ per GPU type
    (``dram_gb_by_gpu``), as in the source study where each GPU's nodes had different host memory.

    ``workload`` is the template of every cell's workload; each cell sets its own ``jps`` and ``seed``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    engine: EngineKind = EngineKind.AUTO
    gpus: tuple[str, ...] = Field(min_length=1)
    policies: tuple[str, ...] = Field(min_length=1)
    jps: tuple[float, ...] = Field(min_length=1)
    dram_gb: tuple[float, ...] = (0.0,)
    dram_gb_by_gpu: dict[str, tuple[float, ...]] = Field(default_factory=dict)
    seeds: tuple[int, ...] = (42,)
    trials: int = Field(1, ge=1, le=100, description="runs of each cell: the base seed, then seeds derived from it")
    model: str = TINY_MODEL
    weights: Weights = Field(Weights.REAL, description="the model's own weights, or dummy ones of its exact shapes")
    workload: WorkloadSpec = WorkloadSpec(jps=1.0)
    engine_options: EngineOptions = EngineOptions()
    limits: RunLimits = RunLimits()
    cpu_profile: CpuProfile | None = Field(
        None, description="the CPU engine as the simulator sees it, measured on the machine that runs it "
        "(sim/profile.py); simulated cells of the cpu device need one")  # fmt: skip
    sim_stack: str = Field(DEFAULT_STACK, description="the engine stack whose calibration simulated GPU cells run "
                           "(sim/stacks.py): source-study, or one fitted on this project's GPU runs")  # fmt: skip
    replicas: tuple[int, ...] = Field((1,), min_length=1, description="replicas per cell, behind a router past one")
    routers: tuple[RouterKind, ...] = Field((RouterKind.LEAST_LOADED,), min_length=1,
                                            description="the routers of cells with several replicas")  # fmt: skip
    serve_overhead: bool = Field(False, description="also run each one-replica cell through Ray Serve (round-robin), "
                                 "to measure what Serve adds against the direct path")  # fmt: skip
    tp: tuple[int, ...] | None = Field(None, description="tensor-parallel degrees of a replica (its GPUs, on one node); "
                                       "None: per GPU type, the smallest whose KV pool holds the longest request")  # fmt: skip
    _degrees: dict[str, tuple[int, ...]] = PrivateAttr(default_factory=dict)  # per GPU type, resolved (``tp_for``)

    @field_validator("gpus")
    @classmethod
    def _known_gpus(cls, gpus: tuple[str, ...]) -> tuple[str, ...]:
        for gpu in gpus:
            if gpu not in known_device_names():
                raise ValueError(f"unknown GPU type {gpu!r}; known: {', '.join(known_device_names())}")
        return _unique(gpus)

    @field_validator("policies")
    @classmethod
    def _known_policies(cls, policies: tuple[str, ...]) -> tuple[str, ...]:
        for policy in policies:
            get_policy(policy)  # an unknown name raises, naming the known ones
        return _unique(policies)

    @field_validator("sim_stack")
    @classmethod
    def _known_stack(cls, name: str) -> str:
        get_stack(name)
        return name

    @field_validator("jps")
    @classmethod
    def _positive_jps(cls, levels: tuple[float, ...]) -> tuple[float, ...]:
        for level in levels:
            if not level > 0:
                raise ValueError(f"jobs per second must be positive, got {level:g}")
        return _unique(levels)

    @field_validator("replicas")
    @classmethod
    def _positive_replicas(cls, counts: tuple[int, ...]) -> tuple[int, ...]:
        for count in counts:
            if count < 1:
                raise ValueError(f"a cell has at least 1 replica, got {count}")
        return _unique(counts)

    @field_validator("tp")
    @classmethod
    def _known_degrees(cls, degrees: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if degrees is None:
            return None
        for degree in degrees:
            if degree not in TP_DEGREES:
                raise ValueError(f"tensor-parallel degree {degree} is not one of {', '.join(map(str, TP_DEGREES))}")
        return _unique(degrees)

    @field_validator("routers")
    @classmethod
    def _unique_routers(cls, routers: tuple[RouterKind, ...]) -> tuple[RouterKind, ...]:
        return _unique(routers)

    @field_validator("dram_gb")
    @classmethod
    def _non_negative_dram(cls, budgets: tuple[float, ...]) -> tuple[float, ...]:
        return _unique(_check_dram(budgets))

    @field_validator("dram_gb_by_gpu")
    @classmethod
    def _non_negative_dram_by_gpu(cls, budgets: dict[str, tuple[float, ...]]) -> dict[str, tuple[float, ...]]:
        return {gpu: _unique(_check_dram(values)) for gpu, values in budgets.items()}

    @model_validator(mode="after")
    def _consistent(self) -> SweepSpec:
        for gpu in self.dram_gb_by_gpu:
            if gpu not in self.gpus:
                raise ValueError(f"dram_gb_by_gpu names {gpu!r}, which is not among the sweep's GPUs {list(self.gpus)}")
        if self.workload.trace is None:
            check_jobs_per_cell(max(self.jps), self.workload.duration_s)
        if self.engine is EngineKind.SIM:
            check_simulable(self.model, self.gpus, has_cpu_profile=self.cpu_profile is not None)
        if self.weights is Weights.DUMMY and (self.model == TINY_MODEL or shipped_name(self.model) is not None):
            source_config(self.model)  # a shipped config that describes shapes only cannot be served
        if self.engine in (EngineKind.AUTO, EngineKind.VLLM):
            if CPU in self.gpus:
                self._check_cpu_policies()
            for gpu in self.gpus:
                self.engine_options.check_pool_holds_a_sequence(gpu)
        self._check_tier_budgets()
        if self.tp is not None:
            self._check_degrees()
        self._degrees = self._resolved_degrees()  # a model no degree holds on a type is one line here, not mid-plan
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> SweepSpec:
        """A copy with ``update``; its degrees resolved for it, since pydantic's copy runs no validator."""
        copied = super().model_copy(update=update, deep=deep)
        copied._degrees = copied._resolved_degrees() if update else self._degrees
        return copied

    def tp_for(self, gpu: str) -> tuple[int, ...]:
        """The tensor-parallel degrees of ``gpu``'s cells: the sweep's, else the sizing's smallest that holds the
        longest request (1 on the CPU engine, and for a model this machine cannot size). Resolved once, when the
        spec is made or copied, so that the grid expands from the spec alone."""
        return self._degrees[gpu]

    def _resolved_degrees(self) -> dict[str, tuple[int, ...]]:
        """``tp_for`` of every GPU type of the sweep, reading the model's config once."""
        if self.tp is not None or self.gpus == (CPU,):
            return dict.fromkeys(self.gpus, self.tp if self.tp is not None else (1,))
        try:
            arch = load_model(self.model)
        except ValueError:
            return dict.fromkeys(self.gpus, (1,))
        utilization, max_len = self.engine_options.gpu_memory_utilization, self.engine_options.max_model_len
        return {gpu: (1,) if gpu == CPU else (default_tp(arch, gpu, utilization, max_len),) for gpu in self.gpus}

    def _check_degrees(self) -> None:
        """A degree vLLM refuses for the model's heads, or whose KV pool cannot hold one ``max_model_len`` sequence
        (with the sizing's margin, ``sizing.parallel.holding_degrees``) on a GPU type a real or simulated replica
        would run on, is one line now rather than a failed start."""
        try:
            arch = load_model(self.model)
        except ValueError:
            return  # a model only its nodes can read: vLLM says so there
        for degree in self.tp:
            if (problem := tp_problem(arch, degree)) is not None:
                raise ValueError(f"--tp {degree} for {self.model}: {problem}")
        if self.engine is EngineKind.FAKE:
            return  # no model is served: any degree places
        options = self.engine_options
        for gpu in (gpu for gpu in self.gpus if gpu != CPU):
            holding = holding_degrees(arch, gpu, options.gpu_memory_utilization, options.max_model_len)
            for degree in self.tp:
                if degree not in holding:
                    raise ValueError(
                        f"--tp {degree}: {self.model} on {degree} {gpu} GPU(s) at utilization "
                        f"{options.gpu_memory_utilization:g} leaves too small a KV pool for one "
                        f"{options.max_model_len}-token sequence; valid on {gpu}: "
                        f"--tp {','.join(map(str, holding)) or '(none)'}"
                    )

    def replica_setups(self) -> tuple[tuple[int, RouterKind | None], ...]:
        """Each (replicas, router) of the grid: one replica has no router (and, with ``serve_overhead``, also
        round-robin through Serve); more have each of ``routers``."""
        single = (None, RouterKind.ROUND_ROBIN) if self.serve_overhead else (None,)
        return tuple((count, router) for count in self.replicas
                     for router in (single if count == 1 else self.routers))  # fmt: skip

    def _check_tier_budgets(self) -> None:
        """A policy whose CPU tier is the DRAM budget has no tier at all with a budget of 0."""
        tiered = [name for name in self.policies if POLICIES[name].tier_is_the_budget]
        for gpu in self.gpus:
            if tiered and 0 in self.dram_for(gpu):
                raise ValueError(
                    f"a DRAM budget of 0 GiB{f' (for {gpu})' if gpu in self.dram_gb_by_gpu else ''} gives {', '.join(tiered)} "
                    "no CPU tier; valid: budgets above 0 for these policies (e.g. --dram-gb 64), or leave them out"
                )

    def _check_cpu_policies(self) -> None:
        cpu_capable = [name for name, policy in POLICIES.items() if policy.runs_on(CPU)]
        for name in self.policies:
            if not POLICIES[name].runs_on(CPU):
                raise ValueError(
                    f"policy {name!r} needs a CUDA GPU and cannot run on the cpu device; there use: {', '.join(cpu_capable)}"
                )

    def cell_seeds(self) -> tuple[int, ...]:
        """Every seed a cell runs with: each base seed, then ``trials - 1`` seeds derived from it."""
        return tuple(trial_seed(seed, trial) for seed in self.seeds for trial in range(self.trials))

    def dram_for(self, gpu: str) -> tuple[float, ...]:
        return self.dram_gb_by_gpu.get(gpu, self.dram_gb)


def _check_dram(budgets: tuple[float, ...]) -> tuple[float, ...]:
    for budget in budgets:
        if budget < 0:
            raise ValueError(f"a DRAM budget must be 0 or more GiB, got {budget:g}")
    return budgets


def _unique(values: tuple) -> tuple:
    return tuple(dict.fromkeys(values))
