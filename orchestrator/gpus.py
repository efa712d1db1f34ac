"""The GPU types a sweep can name, by Ray accelerator type, with the datasheet figures that matter for KV.

Names are Ray's ``accelerator_type`` labels (what ``ray start`` detects from the device name), so a cell
for ``H100`` is placed with the resource ``accelerator_type:H100``. ``cpu`` is not a GPU: it names the
CPU build of vLLM serving the generated tiny model on any node.

Figures are vendor datasheet values for the SXM/PCIe parts the source study used: HBM capacity and
bandwidth, dense BF16 tensor throughput, and an effective host-link (PCIe) bandwidth per direction,
which is what a CPU KV tier moves blocks over.
"""

from __future__ import annotations

from dataclasses import dataclass

CPU = "cpu"


@dataclass(frozen=True)
class GpuType:
    name: str
    memory_gb: float  # HBM, decimal GB as sold
    memory_gib: float  # what the device reports (nvidia-smi), which is what vLLM's utilization applies to
    hbm_gb_s: float
    bf16_tflops: float  # dense
    pcie_gb_s: float  # effective host <-> device, one direction


GPU_TYPES: dict[str, GpuType] = {
    gpu.name: gpu
    for gpu in (
        GpuType("B200", memory_gib=179.1, memory_gb=180, hbm_gb_s=8000, bf16_tflops=2250, pcie_gb_s=55),
        GpuType("H200", memory_gib=140.4, memory_gb=141, hbm_gb_s=4800, bf16_tflops=989, pcie_gb_s=55),
        GpuType("H100", memory_gib=79.6, memory_gb=80, hbm_gb_s=3350, bf16_tflops=989, pcie_gb_s=55),
        GpuType("A100", memory_gib=80.0, memory_gb=80, hbm_gb_s=2039, bf16_tflops=312, pcie_gb_s=25),
        GpuType("L40S", memory_gib=45.0, memory_gb=48, hbm_gb_s=864, bf16_tflops=362, pcie_gb_s=25),
        GpuType("L4", memory_gib=22.5, memory_gb=24, hbm_gb_s=300, bf16_tflops=121, pcie_gb_s=25),
    )
}


def known_device_names() -> list[str]:
    """Every name a sweep's GPU axis accepts."""
    return [*GPU_TYPES, CPU]
