"""Speed of int8 weight-only linear maps against float32 ones, eager, on the CPU.

What: the time of ``x @ W.T`` for 1 and 8 rows of fp32 input, for each weight shape of
``generate.py``'s model (``(out, in)``: 384x1536, 1536x384, 8192x384) and for one pass
through all its maps (55 MB of fp32 weights, 14 MB of int8: they come from memory, as in
decoding), by three candidates: ``F.linear`` with the fp32 weight; PyTorch's weight-only
int8 kernel ``torch._weight_int8pack_mm`` (what ``scratchformer.nn.QuantizedLinear`` runs
on the CPU); and the written-out form, int8 converted to fp32 then ``F.linear``, times the
scales.

Why: decoding reads every weight once a token, so int8 weights (a quarter of the bytes)
may make it up to 4x faster; this shows which int8 form comes closer, shape by shape.

How: the candidates in one process, interleaved after a warm-up (``timing.interleaved``);
the median of each is reported, with the int8 candidates' speed-up over fp32.

    .venv/bin/python benchmarks/int8.py [--repeats 40] [--threads 2]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from generate import D_FF, D_MODEL, N_LAYERS, VOCAB
from scratchformer.nn.quantized import quantize_rows
from timing import Step, interleaved, load_warning, repeats_and_threads

ROWS = (1, 8)
SHAPES = {
    "384x1536": [(D_MODEL, D_FF)],
    "1536x384": [(D_FF, D_MODEL)],
    "8192x384": [(VOCAB, D_MODEL)],
    "all maps": [(3 * D_MODEL, D_MODEL), (D_MODEL, D_MODEL), (D_FF, D_MODEL), (D_MODEL, D_FF)]
    * N_LAYERS
    + [(VOCAB, D_MODEL)],
}
"""``(out, in)`` of the weights timed together: one shape, or every map of a decoding step."""


def candidates(weights: list[Tensor], inputs: list[Tensor]) -> list[Step]:
    """fp32 ``F.linear``; the int8 kernel; int8 converted to fp32, ``F.linear``, scaled."""
    quantized = [quantize_rows(w) for w in weights]
    pairs = list(zip(inputs, weights, strict=True))
    int8 = list(zip(inputs, quantized, strict=True))
    return [
        lambda: [F.linear(x, w) for x, w in pairs],
        lambda: [torch._weight_int8pack_mm(x, q, s) for x, (q, s) in int8],
        lambda: [F.linear(x, q.float()) * s for x, (q, s) in int8],
    ]


def main() -> None:
    args = repeats_and_threads(__doc__.split("\n\n")[0], 40, "passes")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    capability = torch.backends.cpu.get_cpu_capability()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU {capability}")
    warning = load_warning()
    if warning:
        print(warning)
    print(
        f"{'weights':>9} {'rows':>4} {'fp32 ms':>8} {'int8 kernel ms':>14} {'speed-up':>8} "
        f"{'int8 -> fp32 ms':>15} {'speed-up':>8}"
    )
    for name, shapes in SHAPES.items():
        weights = [torch.randn(shape) / shape[1] ** 0.5 for shape in shapes]
        for rows in ROWS:
            inputs = [torch.randn(rows, w.shape[1]) for w in weights]
            fp32, kernel, written = interleaved(candidates(weights, inputs), args.repeats, 3)
            print(
                f"{name:>9} {rows:>4} {fp32.median_s * 1e3:>8.3f} "
                f"{kernel.median_s * 1e3:>14.3f} {fp32.median_s / kernel.median_s:>7.2f}x "
                f"{written.median_s * 1e3:>15.3f} {fp32.median_s / written.median_s:>7.2f}x"
            )


if __name__ == "__main__":
    main()
