"""Speed of ``scratchformer.nn.linear_cross_entropy`` against the projection, then
``torch.nn.functional.cross_entropy``.

What: the loss of a language model's last step, forward and backward (gradients of the
hidden states and of the projection's weight), fp32 on the CPU, with label smoothing 0.1,
at the shapes of the training benchmarks (``speed.py``): the encoder-decoder's 1,536 target
tokens x d_model 256 x 8,000 words, and LM B's 2,048 tokens x 384 x 8,192.

Why: at these shapes the logits are 50-70 MB. The two-step computation writes them, reads
them for ``log_softmax``, zero-fills and writes their gradient, and reads it twice more;
``linear_cross_entropy`` keeps one block of logits at a time. The three products are the
same, so the GFLOP/s column (two steps / ours) says how close each comes to the machine's
matmul speed. The last column is the largest difference between the two in any gradient.

How: both candidates in one process, interleaved after a warm-up (``timing.interleaved``);
the median of each is reported with its ratio.

    .venv/bin/python benchmarks/loss.py [--repeats 20] [--threads 2]
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from scratchformer.nn import linear_cross_entropy
from timing import Step, interleaved, repeats_and_threads
from workloads.lm_train import LM_SHAPES
from workloads.seq2seq_train import SEQ2SEQ

SMOOTHING = 0.1
B = LM_SHAPES["B"]
CASES = {
    "encoder-decoder": (SEQ2SEQ.batch * SEQ2SEQ.tgt_len, SEQ2SEQ.d_model, SEQ2SEQ.vocab),
    "LM B": (B.batch * B.context, B.d_model, B.vocab),
}
"""``(tokens, d_model, vocab)`` of each case."""


def two_steps(hidden: Tensor, weight: Tensor, targets: Tensor, label_smoothing: float) -> Tensor:
    return F.cross_entropy(F.linear(hidden, weight), targets, label_smoothing=label_smoothing)


LossFunction = Callable[[Tensor, Tensor, Tensor, float], Tensor]


def loss_step(loss_fn: LossFunction, hidden: Tensor, weight: Tensor, targets: Tensor) -> Step:
    """Forward and backward of ``loss_fn``; the step returns both gradients."""

    def step() -> tuple[Tensor, Tensor]:
        hidden.grad = weight.grad = None
        loss_fn(hidden, weight, targets, SMOOTHING).backward()
        return hidden.grad, weight.grad

    return step


def main() -> None:
    args = repeats_and_threads(__doc__.split("\n\n")[0], 20, "steps")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, fp32 CPU")
    print(
        f"{'case':<16} {'tokens x d x vocab':>20} {'two steps ms':>13} {'ours ms':>8} "
        f"{'speed-up':>9} {'GFLOP/s':>13} {'max grad diff':>14}"
    )
    for name, (tokens, d_model, vocab) in CASES.items():
        hidden = torch.randn(tokens, d_model, requires_grad=True)
        weight = (torch.randn(vocab, d_model) * d_model**-0.5).requires_grad_()
        targets = torch.randint(0, vocab, (tokens,))
        steps = [loss_step(f, hidden, weight, targets) for f in (two_steps, linear_cross_entropy)]
        theirs, ours = interleaved(steps, args.repeats, warmup=2)
        difference = max(
            (a - b).abs().max().item() for a, b in zip(theirs.last, ours.last, strict=True)
        )
        gflop = 3 * 2 * tokens * d_model * vocab / 1e9  # logits, and the two gradients
        print(
            f"{name:<16} {f'{tokens} x {d_model} x {vocab}':>20} "
            f"{theirs.median_s * 1e3:>13.1f} {ours.median_s * 1e3:>8.1f} "
            f"{theirs.median_s / ours.median_s:>8.2f}x "
            f"{f'{gflop / theirs.median_s:.0f} / {gflop / ours.median_s:.0f}':>13} "
            f"{difference:>14.1e}"
        )


if __name__ == "__main__":
    main()
