"""A cell: one measurement, as a value every stage reads (pure). Its key is a stable hash of everything that can change
its result: the engine, device, policy, load, DRAM budget, seed, model, full workload and engine options, and nothing
else (not the sweep's name, not run limits), so growing a grid never changes the keys of cells already measured, and
two sweeps that share a cell share its key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchestrator.gpus import CPU
from orchestrator.models.served import Weights
from orchestrator.policies.engine_setup import EngineOptions, EngineSetup, device_of, engine_setup
from orchestrator.roofline.hardware import CpuProfile
from orchestrator.routing.rules import RouterKind
from orchestrator.workload.spec import WorkloadSpec

# Bump when the meaning of a field changes, so old results are not mistaken for new ones.
KEY_VERSION = 1
SIM = "sim"  # the placement of simulated cells: any CPU, no GPU
# The simulator's engine stack before there were others (``sim.stacks``): a cell simulated with it names none in its key.
SOURCE_STUDY = "source-study"


class EngineKind(str, Enum):
    AUTO = "auto"  # real vLLM wherever the cluster has the cell's GPU type, the simulator for the others
    VLLM = "vllm"  # real vLLM: on a GPU of the cell's type, or the CPU build for the ``cpu`` device
    SIM = "sim"  # the discrete-event simulator of a vLLM engine (``orchestrator/sim``), on any CPU
    FAKE = "fake"  # a stand-in server with no model, for exercising the orchestration; never a measurement

# Host memory a vLLM replica takes besides its CPU KV tier, per rank: the API server and engine-core processes with
# torch and the CUDA runtime, the tokenizer, LMCache's staging buffers, and a tensor-parallel replica's worker process
# per rank beside them. An upper-leaning estimate; the doctor prints each replica's measured resident memory beside
# it. The CPU engine's figure covers the tiny model and its KV pool, which live in host memory there.
REPLICA_HOST_GIB = {"gpu": 16.0, "cpu": 4.0}


class CellSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: EngineKind
    gpu: str
    policy: str
    dram_gb: float
    model: str
    workload: WorkloadSpec  # carries the cell's jps and seed
    engine_options: EngineOptions
    cpu_profile: CpuProfile | None = None  # a simulated cell of the cpu device: the engine it simulates
    sim_stack: str | None = None  # a simulated cell of a GPU type: the engine stack it simulates (``sim.stacks``)
    weights: Weights = Weights.REAL
    replicas: int = Field(1, ge=1)
    router: RouterKind | None = None  # in front of the replicas; None: one replica, talked to directly
    tp: int = Field(1, ge=1)  # tensor-parallel degree: the GPUs of one replica, all on one node

    @model_validator(mode="after")
    def _routed_past_one(self) -> CellSpec:
        if self.replicas > 1 and self.router is None:
            raise ValueError(f"a cell of {self.replicas} replicas needs a router; valid: {', '.join(RouterKind)}")
        return self

    @property
    def jps(self) -> float:
        return self.workload.jps

    @property
    def seed(self) -> int:
        return self.workload.seed

    @property
    def key(self) -> str:
        # Fields added since keys were first made are left out when unset, so the keys of every other cell stay
        # what they were; a trace's path is left out too (its hash is the trace; a Ray job's copy lives elsewhere).
        exclude: dict = {"workload": {"trace": True if self.workload.trace is None else {"path"}}}
        if self.workload.max_context is None:
            exclude["workload"]["max_context"] = True
        if self.cpu_profile is None:
            exclude["cpu_profile"] = True
        if self.sim_stack in (None, SOURCE_STUDY):  # the simulator before stacks was the source study's
            exclude["sim_stack"] = True
        if self.weights is Weights.REAL:
            exclude["weights"] = True
        if self.router is None:  # one replica, talked to directly
            exclude |= {"replicas": True, "router": True}
        if self.tp == 1:
            exclude["tp"] = True
        fields = self.model_dump(mode="json", exclude=exclude)
        canonical = json.dumps({"v": KEY_VERSION, **fields}, sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        simulated = " (sim)" if self.engine is EngineKind.SIM else ""
        dummy = " weights=dummy" if self.weights is Weights.DUMMY else ""
        routed = f" x{self.replicas} {self.router.value}" if self.router is not None else ""
        parallel = f" tp={self.tp}" if self.tp > 1 else ""
        return (f"{self.gpu}{simulated}{parallel} {self.policy}{routed} jps={self.jps:g} dram={self.dram_gb:g} seed={self.seed}"
                f"{dummy}")  # fmt: skip

    @property
    def placement(self) -> str:
        """Where a worker for this cell runs: a GPU of its type, the CPU engine's place, or any CPU (sim)."""
        return SIM if self.engine is EngineKind.SIM else self.gpu

    @property
    def on_gpus(self) -> bool:
        """Its replicas hold GPUs of its type (not the CPU engine, not the simulator)."""
        return self.placement not in (CPU, SIM)

    @property
    def gang_groups(self) -> tuple[int, ...]:
        """The GPUs of its type this cell holds at once, as groups that must each be on one node: one group of ``tp``
        per replica when it is routed on GPUs (Ray Serve places each replica on its group), one group of ``tp`` for a
        tensor-parallel replica talked to directly; () when one worker's own slot runs it (one GPU, the CPU engine's
        replicas beside their worker, the simulator)."""
        if not self.on_gpus or (self.router is None and self.tp == 1):
            return ()
        return (self.tp,) * (self.replicas if self.router is not None else 1)

    @property
    def gang_size(self) -> int:
        """The slots (GPUs) of its type whose workers step aside for it at once; 0: one worker's own slot runs it."""
        return sum(self.gang_groups)

    @property
    def server_group(self) -> tuple:
        """Cells with equal groups can share one replica (the load and seed are only the client's)."""
        return (self.engine, self.gpu, self.policy, self.dram_gb, self.model, self.weights, self.engine_options,
                self.replicas, self.router, self.tp)  # fmt: skip

    @property
    def device(self) -> str:
        return device_of(self.gpu)

    def summary_columns(self) -> dict[str, object]:
        """Its identity in the summary's columns (``records.row.SummaryRow``): what defines it, as plain values."""
        workload = self.workload
        return dict(
            cell_key=self.key, engine=self.engine.value, gpu=self.gpu, policy=self.policy, jps=self.jps,
            dram_gb=self.dram_gb, seed=self.seed, model=self.model, weights=self.weights.value, scale=workload.scale,
            duration_s=workload.arrival_window_s, tool_time_s=workload.mean_shape().tool_time_s,
            workload_source=workload.source, load_multiplier=workload.load_multiplier(),
            max_context=workload.max_context, replicas=self.replicas, router=self.router.value if self.router else None,
            tp=self.tp, sim_stack=self.sim_stack,
        )  # fmt: skip

    @property
    def engine_setup(self) -> EngineSetup:
        """The engine of each of its replicas, decided in one place for every stage that starts, simulates or sizes it."""
        return engine_setup(self.engine_options, model=self.model, policy=self.policy, gpu=self.gpu, tp=self.tp,
                            dram_gb=self.dram_gb)  # fmt: skip

    @property
    def replica_host_gib(self) -> float:
        """Host memory one replica of this cell takes: the CPU tier its policy allocates from the DRAM
        budget (the replica's, which its ranks split), plus the replica itself, a process per rank. The fake engine
        stands in for a replica with that tier alone; a simulated cell takes nothing."""
        if self.engine is EngineKind.SIM:
            return 0.0
        if self.engine is EngineKind.FAKE:
            return self.dram_gb
        return self.engine_setup.tier_gib + REPLICA_HOST_GIB[self.device] * self.tp

    @property
    def slot_host_gib(self) -> float:
        """Host memory each of its GPU slots reserves: a ``tp``-th of a replica's, so that the slots a tensor-parallel
        replica takes on one node hold it whole."""
        return self.replica_host_gib / (self.tp if self.on_gpus else 1)

    def params(self) -> dict[str, str]:
        """Every axis and option as flat string parameters (for the tracking store)."""
        flat = {
            "engine": self.engine.value,
            "gpu": self.gpu,
            "policy": self.policy,
            "jps": f"{self.jps:g}",
            "dram_gb": f"{self.dram_gb:g}",
            "seed": str(self.seed),
            "model": self.model,
            "weights": self.weights.value,
            "workload.source": self.workload.source,
        }
        if self.router is not None:
            flat |= {"replicas": str(self.replicas), "router": self.router.value}
        if self.sim_stack is not None:
            flat["sim_stack"] = self.sim_stack
        flat["tp"] = str(self.tp)
        for prefix, section in (("workload", self.workload), ("engine_options", self.engine_options)):
            for name, value in section.model_dump(mode="json").items():
                flat[f"{prefix}.{name}"] = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
        if self.cpu_profile is not None:
            flat |= {f"cpu_profile.{name}": f"{value:.6g}" for name, value in asdict(self.cpu_profile).items()}
        return flat
