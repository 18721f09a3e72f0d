"""Speed of our encoder and decoder layers against PyTorch's, forward plus backward.

What: one training step (forward, then backward from a fixed random output gradient, with
gradients for the weights and the inputs) of ``scratchformer.nn.EncoderLayer`` /
``DecoderLayer`` and of ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer`` of
the same sizes, post-LN and pre-LN, fp32 on the CPU, in training mode with dropout 0.1
everywhere (attention weights included, as PyTorch does). The decoder's self-attention is
causal: ours gets ``is_causal=True``; PyTorch gets the causal mask plus ``tgt_is_causal=True``,
which lets it hand SDPA the causal flag instead of the mask.

Why: our layers are written out for readability, and this checks that readability costs
(almost) nothing: the target is ours <= 1.10x PyTorch's time per step.

How: both candidates live in one process. After a warm-up, steps alternate A, B, A, B...
so that drift in machine speed hits both alike; each step is timed alone and the median is
reported.

    .venv/bin/python benchmarks/layers.py [--repeats 30] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from scratchformer.config import ModelConfig
from scratchformer.models import builder
from timing import Step, Timing, interleaved

D_MODEL = 256
N_HEADS = 8
D_FF = 1024
DROPOUT = 0.1
TARGET_RATIO = 1.10
NOISY_SPREAD = 0.20


@dataclass(frozen=True)
class Config:
    batch: int
    length: int
    threads: int
    warmup: int
    repeats: int
    d_model: int = D_MODEL
    n_heads: int = N_HEADS
    d_ff: int = D_FF
    dropout: float = DROPOUT


@dataclass(frozen=True)
class Row:
    layer: str
    norm: str
    ours: Timing
    torch: Timing

    @property
    def ratio(self) -> float:
        return self.ours.median_s / self.torch.median_s

    @property
    def spread(self) -> float:
        """The interquartile spread of the noisier candidate."""
        return max(self.ours.iqr_spread, self.torch.iqr_spread)

    @property
    def meets_target(self) -> bool:
        return self.ratio <= TARGET_RATIO

    def to_json(self) -> dict[str, object]:
        return {
            "layer": self.layer,
            "norm": self.norm,
            "ours_ms": self.ours.median_s * 1e3,
            "torch_ms": self.torch.median_s * 1e3,
            "ratio": self.ratio,
            "target": TARGET_RATIO,
            "meets_target": self.meets_target,
            "ours_samples_ms": [t * 1e3 for t in self.ours.samples_s],
            "torch_samples_ms": [t * 1e3 for t in self.torch.samples_s],
        }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed steps per candidate")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps per candidate")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64, help="source and target length")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args()
    if args.repeats < 3 or args.warmup < 0 or args.batch < 1 or args.length < 1 or args.threads < 1:
        parser.error("need --repeats >= 3, --warmup >= 0 and positive --batch, --length, --threads")
    return args


def make_step(module: nn.Module, forward: Callable[[], Tensor], grad: Tensor) -> Step:
    """A training step: clear gradients, run ``forward``, backpropagate ``grad``."""

    def step() -> None:
        module.zero_grad(set_to_none=True)
        forward().backward(grad)

    return step


def random_input(cfg: Config) -> Tensor:
    """A ``(batch, length, d_model)`` activation that wants a gradient, as inside a stack."""
    return torch.randn(cfg.batch, cfg.length, cfg.d_model, requires_grad=True)


def model_config(cfg: Config, norm_first: bool) -> ModelConfig:
    """The sizes and dropout of ``cfg`` (on the attention weights too, as PyTorch's)."""
    return ModelConfig(
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        d_ff=cfg.d_ff,
        dropout=cfg.dropout,
        attention_dropout=cfg.dropout,
        norm_first=norm_first,
    )


def encoder_steps(cfg: Config, norm_first: bool) -> tuple[Step, Step]:
    """Training steps of our encoder layer and of PyTorch's, on the same input."""
    ours = builder.encoder_layer(model_config(cfg, norm_first))
    theirs = nn.TransformerEncoderLayer(
        cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, batch_first=True, norm_first=norm_first
    )
    x, grad = random_input(cfg), torch.randn(cfg.batch, cfg.length, cfg.d_model)
    return (
        make_step(ours, lambda: ours(x)[0], grad),
        make_step(theirs, lambda: theirs(x), grad),
    )


def decoder_steps(cfg: Config, norm_first: bool) -> tuple[Step, Step]:
    """Training steps of our decoder layer and of PyTorch's (causal self-attention, then
    cross-attention to a memory of the same length), on the same inputs."""
    ours = builder.decoder_layer(model_config(cfg, norm_first), cross_attention=True)
    theirs = nn.TransformerDecoderLayer(
        cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, batch_first=True, norm_first=norm_first
    )
    x, memory = random_input(cfg), random_input(cfg)
    grad = torch.randn(cfg.batch, cfg.length, cfg.d_model)
    causal = nn.Transformer.generate_square_subsequent_mask(cfg.length)
    return (
        make_step(ours, lambda: ours(x, memory, is_causal=True)[0], grad),
        make_step(theirs, lambda: theirs(x, memory, tgt_mask=causal, tgt_is_causal=True), grad),
    )


def run_case(
    cfg: Config, layer: str, build: Callable[[Config, bool], tuple[Step, Step]], norm_first: bool
) -> Row:
    torch.manual_seed(0)
    ours, theirs = build(cfg, norm_first)
    ours_timing, torch_timing = interleaved([ours, theirs], cfg.repeats, cfg.warmup)
    return Row(layer, "pre-LN" if norm_first else "post-LN", ours_timing, torch_timing)


def print_header(cfg: Config) -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, fp32 CPU, training mode")
    print(
        f"d_model {cfg.d_model}, heads {cfg.n_heads}, d_ff {cfg.d_ff}, dropout {cfg.dropout} "
        f"(attention too), batch {cfg.batch}, length {cfg.length} (decoder: target and memory, "
        f"causal self-attention), batch_first"
    )
    print(
        f"forward+backward per step; warm-up {cfg.warmup}, median of {cfg.repeats} interleaved; "
        "spread = interquartile range / median of the noisier candidate"
    )
    print()
    print(
        f"{'layer':<8} {'norm':<8} {'ours ms':>9} {'torch ms':>9} {'ours/torch':>11}  "
        f"{'target':<8} {'':<6} {'spread':>6}"
    )


def print_row(row: Row) -> None:
    verdict = "ok" if row.meets_target else "SLOWER"
    print(
        f"{row.layer:<8} {row.norm:<8} {row.ours.median_s * 1e3:>9.2f} "
        f"{row.torch.median_s * 1e3:>9.2f} {row.ratio:>10.3f}x  <= {TARGET_RATIO:.2f}x "
        f"{verdict:<6} {row.spread:>6.1%}"
    )


def write_json(path: Path, cfg: Config, rows: list[Row]) -> None:
    result = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "config": asdict(cfg),
        "rows": [row.to_json() for row in rows],
    }
    path.write_text(json.dumps(result, indent=2) + "\n")


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    cfg = Config(args.batch, args.length, args.threads, args.warmup, args.repeats)
    print_header(cfg)
    rows = []
    for layer, build in (("encoder", encoder_steps), ("decoder", decoder_steps)):
        for norm_first in (False, True):
            rows.append(run_case(cfg, layer, build, norm_first))
            print_row(rows[-1])
    if any(row.spread > NOISY_SPREAD for row in rows):
        print(f"note: spread above {NOISY_SPREAD:.0%}, the machine was busy; rerun when it is idle")
    if args.json is not None:
        write_json(args.json, cfg, rows)


if __name__ == "__main__":
    main()
