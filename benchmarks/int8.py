"""Speed of int8 weight-only linear maps against float32 ones, on the CPU.

What: the time of ``x @ W.T`` for 1, 2 and 8 rows of fp32 input through every map of
``generate.py``'s model (55 MB of fp32 weights, 14 MB of int8: they come from memory, as
in decoding), by six candidates. Eager: ``F.linear`` with the fp32 weight; PyTorch's
weight-only int8 kernel ``torch._weight_int8pack_mm``; the written-out form, int8
converted to fp32 then ``F.linear``, times the scales; PyTorch's int4 kernel
``torch._weight_int4pack_mm_for_cpu`` (groups of 32 columns, a scale and zero each); ours,
``scratchformer.kernels.int8_matmul`` (each input row quantized to int8, int8 x int8 products;
x86 CPUs with AVX2).
Compiled with the weights frozen in
(``torch.compile``, Inductor's freezing, as ``CompiledModel`` compiles): ``F.linear`` with
the fp32 weights; ``scratchformer.kernels.packed.packed_product`` of the int8 values packed
four to a word, which Inductor fuses into one pass over the int8 bytes.

Why: decoding reads every weight once a token, so int8 weights (a quarter of the bytes)
may make it up to 4x faster; this shows which int8 form comes closer, and up to how many
rows the packed form is the faster (``kernels.quantized.FEW_ROWS``).

How: the candidates in one process, interleaved after a warm-up (``timing.interleaved``)
that compiles; the median of each is reported, with the speed-up over eager fp32 and the
GB/s of weights read. ``ATEN_CPU_CAPABILITY=avx2`` runs the AVX2 kernels on an AVX-512 CPU
(ATen's and Inductor's; give each setting its own ``TORCHINDUCTOR_CACHE_DIR``, since
Inductor's cache does not tell them apart).

    .venv/bin/python benchmarks/int8.py [--repeats 40] [--threads 2]
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor
from torch._inductor import config as inductor_config

from generate import D_FF, D_MODEL, N_LAYERS, VOCAB
from scratchformer.inference.compiled import QUIET_FROZEN
from scratchformer.kernels import kernels_available
from scratchformer.kernels.int8_matmul import int8_matmul
from scratchformer.kernels.packed import pack_columns, packed_product
from scratchformer.nn.quantized import quantize_rows
from timing import interleaved, load_warning, repeats_and_threads

ROWS = (1, 2, 8, 64)
SHAPES = [(3 * D_MODEL, D_MODEL), (D_MODEL, D_MODEL), (D_FF, D_MODEL), (D_MODEL, D_FF)] * N_LAYERS
SHAPES += [(VOCAB, D_MODEL)]
"""``(out, in)`` of every map of a decoding step."""
NAMES = (
    "fp32",
    "int8 kernel",
    "int8 -> fp32",
    "int4 kernel",
    "compiled fp32",
    "compiled packed",
    "int8 x int8",
)
GROUP = 32
"""Columns that share an int4 scale and zero."""


class Maps(torch.nn.Module):
    """``product(x, *weights)`` for every map, each with its own input: weights as buffers,
    which freezing makes constants."""

    def __init__(self, product: Callable[..., Tensor], weights: list[tuple[Tensor, ...]]) -> None:
        super().__init__()
        self.product = product
        self.names = [[f"w{i}_{j}" for j in range(len(t))] for i, t in enumerate(weights)]
        for names, tensors in zip(self.names, weights, strict=True):
            for name, tensor in zip(names, tensors, strict=True):
                self.register_buffer(name, tensor)

    def forward(self, inputs: list[Tensor]) -> list[Tensor]:
        return [
            self.product(x, *(getattr(self, name) for name in names))
            for x, names in zip(inputs, self.names, strict=True)
        ]


def frozen(module: torch.nn.Module) -> Callable[[list[Tensor]], list[Tensor]]:
    """``module`` compiled with its buffers frozen in as constants, as ``CompiledModel``
    freezes (whose module also keeps the unpacking of int8 words from being frozen)."""
    compiled_module = torch.compile(module)

    def run(inputs: list[Tensor]) -> list[Tensor]:
        with inductor_config.patch(QUIET_FROZEN):
            return compiled_module(inputs)

    return run


def int4_groups(weight: Tensor) -> tuple[Tensor, Tensor]:
    """``weight`` ``(out, in)`` in int4 for ``torch._weight_int4pack_mm_for_cpu``: each
    :data:`GROUP` columns of a row asymmetric (``w = (q - 8) * scale + zero``, ``q`` in
    0..15), packed; with the scales and zeros ``(in / GROUP, out, 2)``."""
    out_features, in_features = weight.shape
    groups = weight.view(out_features, in_features // GROUP, GROUP)
    low, high = groups.amin(-1), groups.amax(-1)
    scale = (high - low).clamp_min(1e-8) / 15
    q = torch.round((groups - low[..., None]) / scale[..., None]).clamp(0, 15)
    packed = torch._convert_weight_to_int4pack_for_cpu(q.to(torch.int32).view_as(weight), 1)
    scales_and_zeros = torch.stack([scale, low + 8 * scale], dim=-1).transpose(0, 1)
    return packed, scales_and_zeros.contiguous()


def candidates(weights: list[Tensor]) -> dict[str, Callable[[list[Tensor]], list[Tensor]]]:
    """The candidates of :data:`NAMES` that run here, each taking the list of inputs."""
    quantized = [quantize_rows(w) for w in weights]
    words = [(pack_columns(q), s) for q, s in quantized]
    int4 = [int4_groups(w) for w in weights]
    runs = [
        Maps(F.linear, [(w,) for w in weights]),
        Maps(torch._weight_int8pack_mm, quantized),
        Maps(lambda x, q, s: F.linear(x, q.float()) * s, quantized),
        Maps(lambda x, p, sz: torch._weight_int4pack_mm_for_cpu(x, p, GROUP, sz), int4),
        frozen(Maps(F.linear, [(w,) for w in weights])),
        frozen(Maps(lambda x, p, s: packed_product(x, p) * s, words)),
        Maps(int8_matmul, [(q.clone(), s.clone()) for q, s in quantized]),  # (weights of its own)
    ]
    present = dict(zip(NAMES, runs, strict=True))
    if not kernels_available():
        del present["int8 x int8"]
    return present


def weight_bytes(candidate: str, fp32_bytes: int) -> int:
    """The bytes of weights ``candidate`` reads: fp32's, a quarter (int8) or an eighth."""
    return fp32_bytes // (1 if "fp32" in candidate else 8 if "int4" in candidate else 4)


def main() -> None:
    args = repeats_and_threads(__doc__.split("\n\n")[0], 40, "passes")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    capability = torch.backends.cpu.get_cpu_capability()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU {capability}")
    warning = load_warning()
    if warning:
        print(warning)
    weights = [torch.randn(shape) / shape[1] ** 0.5 for shape in SHAPES]
    fp32_bytes = sum(w.numel() * 4 for w in weights)
    int8_bytes = fp32_bytes // 4
    print(f"{len(weights)} maps, {fp32_bytes / 1e6:.1f} MB fp32, {int8_bytes / 1e6:.1f} MB int8")
    runs = candidates(weights)
    print(f"{'rows':>4} " + " ".join(f"{name:>22}" for name in runs))
    for rows in ROWS:
        inputs = [torch.randn(rows, w.shape[1]) for w in weights]
        with torch.no_grad():
            steps = [partial(run, inputs) for run in runs.values()]
            timings = interleaved(steps, args.repeats, 3)
        fp32_s = timings[0].median_s
        cells = []
        for name, timing in zip(runs, timings, strict=True):
            gbytes = weight_bytes(name, fp32_bytes) / timing.median_s / 1e9
            cells.append(
                f"{timing.median_s * 1e3:6.3f} ms {fp32_s / timing.median_s:4.2f}x "
                f"{gbytes:4.1f}GB/s"
            )
        print(f"{rows:>4} " + " ".join(f"{cell:>22}" for cell in cells))


if __name__ == "__main__":
    main()
