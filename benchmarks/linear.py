"""Speed of the transposed product ``(weight @ x.T).T`` against ``torch.nn.functional.linear``.

What: the time of one pass through every linear map of ``generate.py``'s model (6 layers of
QKV 384->1152, output 384->384, feed-forward 384->1536->384, then the 384->8192 head: the
maps one decoding step multiplies, 55 MB of fp32 weights, so they come from memory as in
decoding), with and without bias, for 1 to 64 rows, fp32 on the CPU.

Why: decoding a batch multiplies every weight by one row a sequence. Where PyTorch's CPU
GEMM runs the transposed product faster, a decoding loop takes it
(``scratchformer.inference.kernels``): for its own number of rows a step, when
``transposed_is_faster`` times it faster for the model's weights. This shows the whole range
of row counts on the machine at hand, and where the transposed product pays.

How: both candidates in one process, interleaved after a warm-up (``timing.interleaved``);
the median of each is reported with its ratio, and the rate at which the transposed product
reads the weights (GB/s): at one row, what bounds the speed of decoding a single sequence.

    .venv/bin/python benchmarks/linear.py [--repeats 40] [--threads 2]
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from generate import D_FF, D_MODEL, N_LAYERS, VOCAB
from scratchformer.inference.kernels import transposed_linear
from timing import Step, interleaved, repeats_and_threads

ROWS = range(1, 65)
SHAPES = [(3 * D_MODEL, D_MODEL), (D_MODEL, D_MODEL), (D_FF, D_MODEL), (D_MODEL, D_FF)] * N_LAYERS
SHAPES.append((VOCAB, D_MODEL))
"""``(out, in)`` of every weight one decoding step of config B multiplies."""


LinearMap = Callable[[Tensor, Tensor, Tensor | None], Tensor]


def one_pass(
    apply: LinearMap, inputs: list[Tensor], weights: list[Tensor], biases: list[Tensor | None]
) -> Step:
    """Every weight times its input, by ``apply`` (``transposed_linear`` or ``F.linear``)."""
    return lambda: [apply(x, w, b) for x, w, b in zip(inputs, weights, biases, strict=True)]


def main() -> None:
    args = repeats_and_threads(__doc__.split("\n\n")[0], 40, "passes")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    weights = [torch.randn(shape) / shape[1] ** 0.5 for shape in SHAPES]
    capability = torch.backends.cpu.get_cpu_capability()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, fp32 CPU {capability}")
    megabytes = sum(w.numel() for w in weights) * 4 / 1e6
    print(f"one pass = {len(SHAPES)} linear maps, {megabytes:.0f} MB")
    header = f"{'rows':>4} {'bias':>5} {'F.linear ms':>12} {'transposed ms':>13} {'speed-up':>9}"
    print(f"{header} {'GB/s':>6}")
    for rows in ROWS:
        inputs = [torch.randn(rows, w.shape[1]) for w in weights]
        for bias in (True, False):
            biases = [torch.randn(w.shape[0]) if bias else None for w in weights]
            candidates = [
                one_pass(f, inputs, weights, biases) for f in (F.linear, transposed_linear)
            ]
            theirs, ours = interleaved(candidates, args.repeats, warmup=3)
            print(
                f"{rows:>4} {bias!s:>5} {theirs.median_s * 1e3:>12.2f} "
                f"{ours.median_s * 1e3:>13.2f} {theirs.median_s / ours.median_s:>8.2f}x "
                f"{megabytes / 1e3 / ours.median_s:>6.1f}"
            )


if __name__ == "__main__":
    main()
