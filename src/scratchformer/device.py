"""Where a model computes: the device a command or a run asks for, and whether it computes
in bfloat16 there (natively, or emulated by autocast)."""

from __future__ import annotations

import itertools
import warnings

import torch

from .config import DEVICES

CPU = torch.device("cpu")


def default_device(choice: str = "auto") -> torch.device:
    """Where to run: the GPU when ``choice`` is ``cuda`` or, under ``auto``, when PyTorch
    sees one; else the CPU."""
    if choice not in DEVICES:
        raise ValueError(f"--device {choice}: must be one of {', '.join(DEVICES)}")
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: PyTorch sees no CUDA device (use --device cpu)")
    use_cuda = choice == "cuda" or (choice == "auto" and torch.cuda.is_available())
    return torch.device("cuda") if use_cuda else CPU


CPU_BF16_PROBES = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
"""torch's private CPU checks for AVX512-BF16 and AMX: a torch without one answers no."""
BELOW_AVX512 = ("DEFAULT", "AVX2")
"""Instruction sets of torch's CPU kernels (``torch.backends.cpu.get_cpu_capability()``)
whose bfloat16 is emulated, whatever the CPU has: ``ATEN_CPU_CAPABILITY=avx2`` runs an
AVX-512 CPU as an AVX2 one, as the benchmarks' tests do to cover both."""


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes in bfloat16 natively (CPUs: AVX512-BF16 or AMX, with
    torch's kernels at AVX-512); elsewhere autocast emulates it, many times slower than
    fp32. A CPU check that this torch lacks counts as no, the safe answer: fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        if torch.backends.cpu.get_cpu_capability() in BELOW_AVX512:
            return False
        probes = (getattr(torch.cpu, name, None) for name in CPU_BF16_PROBES)
        return any(probe is not None and probe() for probe in probes)
    return True


def uses_bf16(precision: str, device: torch.device, warn: bool = True) -> bool:
    """Whether ``precision`` (``fp32``, ``bf16`` or ``auto``) computes in bfloat16 on
    ``device``: ``auto`` only where it is native; ``bf16`` everywhere, with a warning (under
    ``warn``) where autocast would emulate it."""
    native = native_bf16(device)
    if precision == "bf16" and warn and not native:
        warnings.warn(
            f"precision 'bf16': this {device.type} has no native bfloat16, so autocast "
            "emulates it, many times slower than precision 'fp32' (or 'auto')",
            stacklevel=2,
        )
    return precision == "bf16" or (precision == "auto" and native)


def bf16_autocast(device: torch.device, enabled: bool) -> torch.autocast:
    """bfloat16 autocast on ``device`` if ``enabled``: matrix products in bfloat16, the
    reductions that need it (softmax, norms, losses) in float32."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled)


def model_device(model: torch.nn.Module) -> torch.device:
    """Where a model's weights are (its first parameter or buffer): where its inputs go.
    The CPU for a model that holds none here (one run by another runtime, as ONNX's)."""
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return tensor.device
    return torch.device("cpu")


def decoding_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's weights, where decoding runs. Decoding with dropout on
    would be random and would break the cache's exactness, so training mode is an error."""
    if model.training:
        raise ValueError("the model is in training mode (dropout on); call model.eval() first")
    return model_device(model)
