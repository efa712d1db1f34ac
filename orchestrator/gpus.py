"""The GPU types a sweep can name, by Ray accelerator type, with the datasheet figures that matter for KV.

Names are Ray's ``accelerator_type`` labels (what ``ray start`` detects from the device name), so a cell
for ``H100`` is placed with the resource ``accelerator_type:H100``. ``cpu`` is not a GPU: it names the
CPU build of vLLM serving the generated tiny model on any node.

The figures live in ``data/gpus.toml`` (datasheet HBM capacity and bandwidth, dense BF16 and FP8 throughput, PCIe
generation and its effective bandwidth per direction, which is what a CPU KV tier moves blocks over, and the link
the GPUs of a tensor-parallel replica all-reduce over: its datasheet bandwidth and what an all-reduce was measured to
reach).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

CPU = "cpu"
CATALOGUE = Path(__file__).parent / "data" / "gpus.toml"


@dataclass(frozen=True)
class GpuType:
    name: str
    memory_gb: float  # HBM, decimal GB as sold
    memory_gib: float  # what the device reports (nvidia-smi), which is what vLLM's utilization applies to
    hbm_gb_s: float
    bf16_tflops: float  # dense
    pcie_gen: int
    pcie_gb_s: float  # effective host <-> device, one direction
    interconnect: str  # what a tensor-parallel replica's GPUs all-reduce over (NVLink generation, or PCIe)
    interconnect_gb_s: float  # its datasheet bandwidth per GPU, one direction
    allreduce_bus_gb_s: float  # achieved all-reduce bus bandwidth (nccl-tests' busbw)
    allreduce_latency_us: float  # the fixed cost of one all-reduce
    fp8_tflops: float = 0.0  # dense; 0 where the part has no FP8 tensor cores

    # vLLM's serving defaults by device (``EngineArgs``): the largest parts get a 16K token budget, 70 GiB
    # and up (except A100, where it hurt throughput) 8K, the rest 2K.
    @property
    def default_max_num_batched_tokens(self) -> int:
        if self.memory_gib >= 160:
            return 16384
        return 8192 if self._large else 2048

    @property
    def default_max_num_seqs(self) -> int:
        return 1024 if self._large else 256

    @property
    def _large(self) -> bool:
        return self.memory_gib >= 70 and self.name != "A100"


def _load(path: Path) -> dict[str, GpuType]:
    rows = tomllib.loads(path.read_text())
    return {name: GpuType(name=name, **fields) for name, fields in rows.items()}


GPU_TYPES: dict[str, GpuType] = _load(CATALOGUE)


def known_device_names() -> list[str]:
    """Every name a sweep's GPU axis accepts."""
    return [*GPU_TYPES, CPU]
