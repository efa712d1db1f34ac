"""What each GPU type was measured to reach (``gpu_rates.toml``: public microbenchmarks, each with its source), and
how the simulator's roofline uses it (pure once loaded). The file's bytes are part of the simulator's version
(``sim.version``), so its first comment still names this module's path before it moved to ``roofline/``.

The calibration (``calibration.toml``) was fitted on one GPU, the reference (H200). Its efficiencies are shares of that
GPU's datasheet rates, and each holds two losses at once: the hardware's (no matmul reaches the datasheet's peak, no
kernel the full memory bandwidth) and the serving stack's (small GEMMs, attention, launch gaps). Carried to another GPU
as they are, they assume its hardware loses what the reference's does: a datasheet-times-one-efficiency model. Where a
GPU's rate was measured, its hardware share is its own instead:

    rate(gpu) = efficiency * datasheet(gpu) * relative,   relative = (measured(gpu) / datasheet(gpu))
                                                                     / (measured(ref) / datasheet(ref))

so the reference is unchanged, the stack's share of what the hardware reaches is the reference's, and a rate that was not
measured keeps the reference's share (``relative`` 1: the fallback). The host link needs no calibration: its measured
rate replaces the catalogue's figure.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.gpus import GPU_TYPES, GpuType

RATES_FILE = Path(__file__).parent / "gpu_rates.toml"
RATE_NAMES = ("matmul_bf16_tflops", "matmul_fp8_tflops", "memory_read_gb_s", "host_link_gb_s")


@dataclass(frozen=True)
class Measurement:
    value: float
    source: str


@dataclass(frozen=True)
class RelativeRates:
    """A GPU's measured share of each datasheet rate over the reference GPU's share of its own (1: the same share, the
    fallback where nothing was measured)."""

    matmul_bf16: float = 1.0
    matmul_fp8: float = 1.0
    memory: float = 1.0


@dataclass(frozen=True)
class GpuRates:
    """Every GPU type's measurements, by GPU and rate, and the reference GPU the calibration was fitted on."""

    reference: str
    measured: dict[str, dict[str, Measurement]]

    @classmethod
    def load(cls, path: Path = RATES_FILE) -> GpuRates:
        return cls.load_text(path.read_text(), str(path))

    @classmethod
    def load_text(cls, text: str, path: str = "rates") -> GpuRates:
        document = tomllib.loads(text)
        reference = document.pop("reference", None)
        if reference not in GPU_TYPES:
            raise ValueError(f"{path}: reference {reference!r} is not a GPU type; valid: {', '.join(GPU_TYPES)}")
        measured: dict[str, dict[str, Measurement]] = {}
        for gpu, rates in document.items():
            if gpu not in GPU_TYPES:
                raise ValueError(f"{path}: [{gpu}] is not a GPU type; valid: {', '.join(GPU_TYPES)}")
            for name, entry in rates.items():
                if name not in RATE_NAMES:
                    raise ValueError(f"{path}: [{gpu}.{name}] is not a measured rate; valid: {', '.join(RATE_NAMES)}")
                if not isinstance(entry, dict) or set(entry) != {"value", "source"} or not entry["value"] > 0:
                    raise ValueError(f"{path}: [{gpu}.{name}] needs a positive value and its source, and nothing else")
                measured.setdefault(gpu, {})[name] = Measurement(float(entry["value"]), str(entry["source"]))
        return cls(reference, measured)

    def relative(self, gpu: str) -> RelativeRates:
        """``gpu``'s measured shares over the reference's (``RelativeRates``). The calibration was fitted in BF16, so an
        FP8 share is taken over the reference's BF16 share; a part whose FP8 rate was not measured is taken to reach
        the share of its FP8 peak that it reaches of its BF16 peak."""
        matmul = self.share(self.reference, "matmul_bf16_tflops")
        bf16 = _over(self.share(gpu, "matmul_bf16_tflops"), matmul) or 1.0
        fp8 = _over(self.share(gpu, "matmul_fp8_tflops"), matmul) or bf16
        memory = _over(self.share(gpu, "memory_read_gb_s"), self.share(self.reference, "memory_read_gb_s")) or 1.0
        return RelativeRates(matmul_bf16=bf16, matmul_fp8=fp8, memory=memory)

    def measurement(self, gpu: str, name: str) -> Measurement | None:
        return self.measured.get(gpu, {}).get(name)

    def with_measured(self, gpu: str, values: dict[str, float], source: str) -> GpuRates:
        """These rates with ``gpu``'s ``values`` (by rate name) measured as ``source`` says, the others kept."""
        own = self.measured.get(gpu, {}) | {name: Measurement(value, source) for name, value in values.items()}
        return replace(self, measured=self.measured | {gpu: own})

    def host_link_gb_s(self, gpu: str) -> float:
        """The measured host link, else the catalogue's effective figure."""
        measured = self.measurement(gpu, "host_link_gb_s")
        return measured.value if measured else GPU_TYPES[gpu].pcie_gb_s

    def share(self, gpu: str, name: str) -> float | None:
        """The measurement ``name`` of ``gpu`` as a share of its datasheet figure; None when not measured."""
        measured = self.measurement(gpu, name)
        datasheet = _datasheet(GPU_TYPES[gpu], name)
        return measured.value / datasheet if measured and datasheet else None


def _over(share: float | None, reference_share: float | None) -> float | None:
    return share / reference_share if share is not None and reference_share is not None else None


def _datasheet(gpu: GpuType, name: str) -> float:
    return {"matmul_bf16_tflops": gpu.bf16_tflops, "matmul_fp8_tflops": gpu.fp8_tflops,
            "memory_read_gb_s": gpu.hbm_gb_s, "host_link_gb_s": gpu.pcie_gb_s}[name]  # fmt: skip


GPU_RATES = GpuRates.load()
