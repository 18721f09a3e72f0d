"""The machine's physical limits, measured at the start of a run: what every row is held
against.

A step of work takes at least its FLOPs over the matmul peak and at least the bytes it must
move over the memory bandwidth, so its fraction of the limit (the roofline) is
``max(achieved FLOP/s / peak, achieved bytes/s / bandwidth)``: training and encoder
inference are bound by the first, batch-1 decoding (every weight read once a token) by the
second.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from scratchformer.device import native_bf16
from timing import interleaved

PEAK_SIZE = 2048
COPY_MIB = 256
"""Bytes copied to time the memory bandwidth: far beyond any cache of the CPUs measured."""


@dataclass(frozen=True)
class Machine:
    """The limits of this CPU, measured in one run."""

    peak_gflops: float
    """fp32 matmul peak: the fastest ``PEAK_SIZE`` x ``PEAK_SIZE`` ``torch.mm``."""
    bandwidth_gbs: float
    """Memory copy bandwidth: bytes read plus written by the fastest ``copy_`` of
    ``COPY_MIB`` MiB."""
    bf16_peak_gflops: float | None = None
    """The same matmul in bfloat16, on a CPU that computes it natively; else None."""
    cpu: str = ""
    """The CPU's name (:func:`cpu_name`)."""
    isa: str = ""
    """The instruction set of torch's kernels (``AVX2``, ``AVX512``): CPUs of one name
    differ, and ``ATEN_CPU_CAPABILITY`` may lower it."""

    def peak(self, precision: str) -> float:
        """The matmul peak of ``precision`` (``fp32`` or ``bf16``)."""
        if precision == "bf16":
            if self.bf16_peak_gflops is None:
                raise ValueError("this CPU has no native bfloat16: no bf16 peak")
            return self.bf16_peak_gflops
        return self.peak_gflops

    def fraction(self, gflops: float | None, gbytes_per_s: float | None, precision: str) -> float:
        """The fraction of the limit reached by work running at ``gflops`` and moving
        ``gbytes_per_s`` (either may be None: not counted)."""
        compute = gflops / self.peak(precision) if gflops is not None else 0.0
        memory = gbytes_per_s / self.bandwidth_gbs if gbytes_per_s is not None else 0.0
        return max(compute, memory)

    def describe(self) -> str:
        bf16 = (
            f"bf16 matmul peak {self.bf16_peak_gflops:.1f} GFLOP/s"
            if self.bf16_peak_gflops is not None
            else "no native bf16"
        )
        return (
            f"{self.cpu}, kernels {self.isa}; "
            f"fp32 matmul peak {self.peak_gflops:.1f} GFLOP/s (fastest {PEAK_SIZE}x{PEAK_SIZE} "
            f"torch.mm), {bf16}, memory copy bandwidth {self.bandwidth_gbs:.1f} GB/s "
            f"(read + written, fastest copy of {COPY_MIB} MiB)"
        )


def matmul_peak_gflops(repeats: int, dtype: torch.dtype = torch.float32) -> float:
    """The fastest of ``repeats`` ``PEAK_SIZE`` x ``PEAK_SIZE`` ``torch.mm`` in ``dtype``."""
    a, b = (torch.randn(PEAK_SIZE, PEAK_SIZE).to(dtype) for _ in range(2))
    out = torch.empty(PEAK_SIZE, PEAK_SIZE, dtype=dtype)
    (timing,) = interleaved([partial(torch.mm, a, b, out=out)], repeats, warmup=1)
    return 2 * PEAK_SIZE**3 / min(timing.samples_s) / 1e9


def copy_bandwidth_gbs(repeats: int) -> float:
    """Bytes read and written per second by the fastest of ``repeats`` copies of
    ``COPY_MIB`` MiB (on every thread torch uses)."""
    source = torch.ones(COPY_MIB * 2**20 // 4)
    target = torch.empty_like(source)
    (timing,) = interleaved([partial(target.copy_, source)], repeats, warmup=1)
    return 2 * source.numel() * 4 / min(timing.samples_s) / 1e9


def measure_machine(repeats: int) -> Machine:
    """This CPU's limits, each the best of ``repeats`` timings."""
    native = native_bf16(torch.device("cpu"))
    return Machine(
        matmul_peak_gflops(repeats),
        copy_bandwidth_gbs(repeats),
        matmul_peak_gflops(repeats, torch.bfloat16) if native else None,
        cpu_name(),
        torch.backends.cpu.get_cpu_capability(),
    )


def cpu_name() -> str:
    """The CPU's model name (Linux's ``/proc/cpuinfo``), else what ``platform`` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [ln for ln in cpuinfo.read_text().splitlines() if ln.startswith("model name")]
        if names:
            return names[0].split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def matmuls_gflops(
    shapes: list[tuple[int, int, int, int]], dtype: torch.dtype, repeats: int
) -> float:
    """GFLOP/s of the matrix products ``shapes`` alone, each ``(batch, m, k, n)`` a
    ``(batch, m, k) @ (batch, k, n)`` on random inputs in ``dtype``, one after the other as
    a step runs them: the best any step made of them (and more) could reach on this CPU."""
    operands = [
        (torch.randn(b, m, k).to(dtype), torch.randn(b, k, n).to(dtype)) for b, m, k, n in shapes
    ]

    def run() -> None:
        for a, b in operands:
            torch.bmm(a, b)

    (timing,) = interleaved([run], repeats, warmup=1)
    flops = sum(2 * b * m * k * n for b, m, k, n in shapes)
    return flops / min(timing.samples_s) / 1e9
