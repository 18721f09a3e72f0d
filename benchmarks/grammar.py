"""Structured output's cost: the allowed-token masks of a JSON schema against the decoding
step they are added to.

What: per new token, at batch 1 and batch 8, (a) one decoding step of the decoder-only LM of
``benchmarks/generate.py`` (6 layers, d_model 384, vocab 8192, random weights; greedy
generation with the KV cache, 16-token prompts, its time over its new tokens) and (b) the
grammar's work for that step: the masks filled (``Constraint.fill`` at batch 1,
``fill_masks`` at batch 8), applied to ``(batch, 8192)`` logits (``masked_fill`` with
``-inf``), a token chosen (argmax) and taken by each row (``Constraint.advance``). The rows
follow a schema with nested objects, an array, an enum, strings and numbers; the tokenizer is
a byte-level BPE of 8,192 tokens trained on tinyshakespeare (``$SCRATCHFORMER_DATA``). The
logits are random, so the rows write random strings and numbers, the grammar's busiest
states; a row whose text is finished starts a new one.

Why: a constrained request should cost little more than a free one: the target is a
constrained step at most 1.3x the unconstrained one ((a + b) / a).

How: both in one process; after a warm-up the two alternate (``timing.interleaved``) and
the median of each is reported, per token.

    .venv/bin/python benchmarks/grammar.py [--repeats 5] [--threads 2] [--quick]
"""

from __future__ import annotations

import argparse
import platform

import torch

from generate import BATCHES, PROMPT_LEN, VOCAB, our_model
from scratchformer.data.registry import dataset_file
from scratchformer.data.tokenizer import Tokenizer
from scratchformer.inference import generate
from scratchformer.inference.grammar import Constraint, Grammar, fill_masks
from timing import interleaved, load_warning

TARGET = 1.3
"""The most a constrained step may cost, in unconstrained steps."""
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0},
        "role": {"enum": ["admin", "user", "guest"]},
        "scores": {"type": "array", "items": {"type": "number"}, "maxItems": 4},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
            "required": ["city", "zip"],
        },
    },
    "required": ["name", "age", "role", "scores", "address"],
}


def tokenizer(quick: bool) -> Tokenizer:
    """Byte-level BPE of 8,192 tokens on tinyshakespeare (its first 100,000 characters and
    1,024 tokens with ``quick``)."""
    text = dataset_file("tinyshakespeare", "train").read_text(encoding="utf-8")[
        : 100_000 if quick else None
    ]
    return Tokenizer.train("bpe", text.splitlines(), 1024 if quick else VOCAB, ("pad", "eos"))


class Walk:
    """``batch`` rows following ``grammar`` under random logits, a finished row starting
    again: :meth:`step` is the grammar's work for one decoding step."""

    def __init__(self, grammar: Grammar, tokens: Tokenizer, batch: int, seed: int) -> None:
        self.make = lambda: Constraint(grammar, tokens, VOCAB)
        self.rows = [self.make() for _ in range(batch)]
        self.masks = torch.empty(batch, VOCAB, dtype=torch.bool)
        generator = torch.Generator().manual_seed(seed)
        self.logits = torch.randn(64, batch, VOCAB, generator=generator)
        self.steps = 0

    def step(self) -> None:
        if len(self.rows) == 1:
            self.rows[0].fill(self.masks[0])
        else:
            fill_masks(self.rows, self.masks)
        logits = self.logits[self.steps % len(self.logits)].masked_fill(~self.masks, -torch.inf)
        for i, token in enumerate(logits.argmax(-1).tolist()):
            if self.rows[i].finished:
                self.rows[i] = self.make()
            else:
                self.rows[i].advance(token)
        self.steps += 1

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()


def measure(model: torch.nn.Module, walk: Walk, new_tokens: int, repeats: int) -> float:
    """Print the times a token of a decoding step and of the grammar's work at the walk's
    batch; return the constrained step in unconstrained ones."""
    batch = len(walk.rows)
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(VOCAB, (batch, PROMPT_LEN), generator=generator).tolist()

    def decode() -> None:
        generate(model, prompts, max_new_tokens=new_tokens, greedy=True, eos_id=None)

    steps, masks = interleaved([decode, lambda: walk.run(new_tokens)], repeats, warmup=1)
    step_ms, mask_ms = steps.median_s / new_tokens * 1e3, masks.median_s / new_tokens * 1e3
    ratio = (step_ms + mask_ms) / step_ms
    print(
        f"batch {batch}: decoding step {step_ms:.2f} ms, masks {mask_ms:.3f} ms a token "
        f"(spreads {steps.range_spread:.0%}, {masks.range_spread:.0%}): "
        f"constrained step {ratio:.3f}x"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens a timed run")
    parser.add_argument("--quick", action="store_true", help="a smaller tokenizer, 2 repeats")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    repeats = 2 if args.quick else args.repeats
    print(
        f"CPU: {platform.processor() or platform.machine()}, "
        f"{torch.backends.cpu.get_cpu_capability()}, {args.threads} threads; "
        f"torch {torch.__version__}"
    )
    warning = load_warning()
    if warning:
        print(warning)
    tokens = tokenizer(args.quick)
    model = our_model()
    grammar = Grammar("json_schema", SCHEMA)
    ratios = [
        measure(model, Walk(grammar, tokens, batch, batch), args.new_tokens, repeats)
        for batch in BATCHES
    ]
    verdict = "met" if max(ratios) <= TARGET else "missed"
    print(
        f"constrained step at most {max(ratios):.3f}x the unconstrained "
        f"(target <= {TARGET}x, {verdict})"
    )


if __name__ == "__main__":
    main()
