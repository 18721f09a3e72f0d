"""Speed side by side: our models against ``torch.nn`` and Hugging Face, fp32 on the CPU.

What: six workloads, each comparing our model with models of the same shape built from
PyTorch's own ``torch.nn`` modules and from Hugging Face ``transformers``, on the same
random inputs, with random weights (translation excepted):

- ``lm-train``: a training step of a decoder-only LM (forward, cross-entropy on the next
  tokens, backward, AdamW step) in two sizes, A (vocab 65, 4 layers, d_model 128, 4 heads,
  d_ff 512, context 64, batch 12) and B (vocab 8192, 6 layers, d_model 384, 6 heads, d_ff
  1536, context 256, batch 8). Ours; a causal ``nn.TransformerEncoder`` LM (``is_causal``);
  ``GPT2LMHeadModel``. All pre-LN, exact GELU, learned positions, tied head, no dropout.
- ``seq2seq-train``: a training step of the paper's encoder-decoder at the size of the
  Multi30k recipe (3 + 3 layers, d_model 256, 8 heads, d_ff 1024, one vocabulary of 8000
  for source, target and output), batch 64 x 24 tokens on each side, no padding, dropout
  0.1 everywhere (embeddings, sub-layers, feed-forward and attention weights, as
  ``nn.Transformer`` has it). Ours; ``nn.Transformer`` (without the final LayerNorms,
  which post-LN does not have); ``MarianMTModel``. All post-LN, ReLU, sinusoidal positions.
- ``generate``: greedy generation, 16-token prompts and 256 new tokens, batch 1 and 8: ours
  with the KV cache against ``GPT2LMHeadModel.generate`` with its cache, the models and
  runs of ``benchmarks/generate.py`` (size B, but GPT-2's GELU-tanh and 512 positions).
- ``encoder-infer``: a classification forward in eval mode under ``torch.inference_mode()``
  on 32 sentences of random lengths up to 64, padded to the longest (vocab 8000, 4 layers,
  d_model 256, 4 heads, d_ff 1024, post-LN, learned positions, mean pooling over real
  tokens, 2 classes). Ours with the attention mask; ``nn.TransformerEncoder`` on its fast
  path (``src_key_padding_mask``, nested tensors: padding is skipped).
- ``translate``: sentences/s translating the 1,000 German sentences of Multi30k
  test_2016_flickr (``$SCRATCHFORMER_DATA/multi30k/test_2016_flickr.de.gz``) with beam 5
  (``scratchformer.inference.translate``, as ``scratchformer translate`` does), by the
  trained ``multi30k-de-en`` run, or by a random model of that recipe's shape when no run
  is there (hypotheses then run to their length limit); with the KV cache and without it
  (every beam's prefix recomputed each step, timed once); how many translations differ is
  printed.
- ``memory``: the peak resident memory (max RSS: Linux's ``VmHWM``) of training step B
  and of generation at batch 8, each candidate in a fresh process. The figure compared is
  the growth: the peak at the end of the runs minus the peak after imports, model
  construction and inputs (activations, gradients, optimizer state, caches, workspace);
  the total peak is printed beside it. Every child imports the same modules.

The training workloads also time ours through ``torch.compile`` (what ``train.compile``
does; ``--no-compile`` skips it): its ratios are printed on a line of their own, and the
first step of every candidate, which for this one includes compiling, is in its note.

Why: the project claims to be fast on a laptop CPU; these workloads make the claim
testable against the two implementations a user would otherwise pick. The targets, ours /
theirs, printed with each figure as "ok" or "MISSED": lm-train >= 1.25x torch.nn and
>= 1.5x Hugging Face tokens/s (both sizes); seq2seq-train >= 1.3x both; generate >= 3x at
batch 1 and >= 1.5x at batch 8; encoder-infer >= 1.0x; memory growth <= both.

How: each workload's candidates live in one process (``--threads`` intra-op threads, 2 by
default). After a warm-up, repetitions alternate the candidates (A, B, C, A, B, C, ...)
so that drift in machine speed hits them alike; the median of each is reported, with its
spread (interquartile range / median from 4 samples up, range / median below). Timed runs
per candidate: 10 training steps, 20 forwards, 3 generations or translations of the whole
set (``--repeats`` sets them all). Every run
is checked to do its work: losses finite, logits of the right shape, every new token
generated, every sentence translated. The training and inference workloads also give the
achieved GFLOP/s (see :func:`train_flops`) against the machine's fp32 matmul peak, timed
on a 2048 x 2048 ``torch.mm`` at the start of the run. GPU figures are not measured here.
``--quick`` keeps the shapes and cuts the repetitions, generates 32 tokens and translates
the first 50 sentences: it checks that everything runs, its figures mean little.

    .venv/bin/python benchmarks/speed.py [--workload NAME ...] [--repeats N] [--threads 2]
        [--json out.json] [--quick] [--no-compile]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from torch import Tensor, nn
from transformers import GPT2Config, GPT2LMHeadModel, MarianConfig, MarianMTModel

import generate as gen
from scratchformer import ModelConfig, build_model, count_parameters
from scratchformer.config import Recipe
from scratchformer.data.readers import read_lines
from scratchformer.data.registry import dataset_file
from scratchformer.inference.translate import translate
from scratchformer.nn.embedding import sinusoidal_table
from scratchformer.run import load_run
from scratchformer.tasks import build_task
from scratchformer.tasks.translation import TranslationTask
from scratchformer.training.checkpoint import MODEL_FILE
from timing import Step, Timing, interleaved, load_warning, timed

ROOT = Path(__file__).resolve().parents[1]
OURS, TORCH = "ours", "torch.nn"
COMPILED = "ours, compiled"
"""Ours through ``torch.compile`` (``train.compile``); its first step includes compiling."""
GPT2, MARIAN = "HF GPT-2", "HF Marian"
NOISY_SPREAD = 0.20
PEAK_SIZE = 2048
LR = 1e-4

TRANSLATE_RUN = ROOT / "runs" / "multi30k-de-en"
TRANSLATE_RECIPE = ROOT / "recipes" / "multi30k-de-en.toml"
BEAM = 5
QUICK_SENTENCES = 50
QUICK_NEW_TOKENS = 32
GENERATE_TARGETS = {1: 3.0, 8: 1.5}
"""Batch size: the least speed-up of ours with the KV cache over Hugging Face."""


@dataclass(frozen=True)
class Settings:
    threads: int
    quick: bool
    repeats: int | None
    """``--repeats``; None: each workload's own default."""
    peak_gflops: float | None = None
    """The machine's fp32 matmul peak (not measured in a memory child)."""
    compile: bool = True
    """Also time ours through ``torch.compile`` in the training workloads."""

    def repeats_or(self, default: int, quick: int) -> int:
        """``--repeats`` if given, else the workload's default (``quick`` under --quick)."""
        if self.repeats is not None:
            return self.repeats
        return quick if self.quick else default

    @property
    def warmup(self) -> int:
        return 1 if self.quick else 2

    @property
    def memory_runs(self) -> int:
        return 2 if self.quick else 3

    @property
    def new_tokens(self) -> int:
        return QUICK_NEW_TOKENS if self.quick else 256


@dataclass(frozen=True)
class Figure:
    """One candidate's figure in one case: a rate (``timing`` holds its runs) or MiB."""

    candidate: str
    value: float
    unit: str
    timing: Timing | None = None
    gflops: float | None = None
    note: str = ""

    @property
    def spread(self) -> float | None:
        """How noisy the runs were: interquartile range / median from 4 runs, range /
        median below; None for a single run or a memory figure."""
        if self.timing is None or len(self.timing.samples_s) < 2:
            return None
        if len(self.timing.samples_s) < 4:
            return self.timing.range_spread
        return self.timing.iqr_spread

    def to_json(self) -> dict[str, object]:
        timed = {}
        if self.timing is not None:
            timed = {"median_s": self.timing.median_s, "samples_s": self.timing.samples_s}
        return {
            "candidate": self.candidate,
            "value": self.value,
            "unit": self.unit,
            **timed,
            "spread": self.spread,
            "gflop_per_s": self.gflops,
            "note": self.note,
        }


@dataclass(frozen=True)
class Target:
    """Ours / ``against`` must be at least ``bound`` (a rate) or at most (memory)."""

    against: str
    bound: float
    higher_is_better: bool = True

    def met(self, ratio: float) -> bool:
        return ratio >= self.bound if self.higher_is_better else ratio <= self.bound

    def __str__(self) -> str:
        return f"{'>=' if self.higher_is_better else '<='} {self.bound:.2f}x"


@dataclass(frozen=True)
class Row:
    """One case of a workload: the figure of every candidate, and the targets of ours."""

    workload: str
    case: str
    description: str
    figures: list[Figure]
    targets: list[Target]
    ours: str = OURS
    variants: tuple[str, ...] = ()
    """Other ways of running ours (compiled): their ratios are printed and kept too."""
    peak_gflops: float | None = None
    """The machine's matmul peak, for the rows that count FLOPs."""
    remark: str = ""

    @property
    def title(self) -> str:
        return f"{self.workload} {self.case}".strip()

    def figure(self, candidate: str) -> Figure:
        return next(f for f in self.figures if f.candidate == candidate)

    def ratio(self, target: Target, ours: str | None = None) -> float:
        """Ours (or the variant ``ours``) / the candidate of ``target``."""
        theirs = self.figure(target.against).value
        return self.figure(ours or self.ours).value / theirs if theirs else math.inf

    def target_for(self, candidate: str) -> Target | None:
        return next((t for t in self.targets if t.against == candidate), None)

    def to_json(self) -> dict[str, object]:
        return {
            "workload": self.workload,
            "case": self.case,
            "description": self.description,
            "ours": self.ours,
            "figures": [f.to_json() for f in self.figures],
            "variants": list(self.variants),
            "comparisons": [
                {
                    "ours": ours,
                    "against": t.against,
                    "ratio": self.ratio(t, ours),
                    "target": t.bound,
                    "higher_is_better": t.higher_is_better,
                    "met": t.met(self.ratio(t, ours)),
                }
                for ours in (self.ours, *self.variants)
                for t in self.targets
            ],
            "matmul_peak_gflop_per_s": self.peak_gflops,
            "remark": self.remark,
        }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workload",
        action="append",
        choices=list(WORKLOADS),
        help="run only this workload (repeatable; default: all)",
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per candidate")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--json", type=Path, default=None, help="also write every row here")
    parser.add_argument("--quick", action="store_true", help="few runs: checks, not figures")
    parser.add_argument(
        "--no-compile", action="store_true", help="skip ours through torch.compile (training)"
    )
    parser.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if (args.repeats is not None and args.repeats < 1) or args.threads < 1:
        parser.error("need --repeats >= 1 and --threads >= 1")
    return args


# ---- FLOPs -------------------------------------------------------------------------------


def layer_matmul_params(d_model: int, d_ff: int) -> int:
    """Weights in the matmuls of one layer with self-attention only: Q, K, V and output
    projections (4 d^2) and the feed-forward (2 d d_ff). Biases and norms are not matmuls."""
    return 4 * d_model**2 + 2 * d_model * d_ff


def attention_flops(queries: int, keys: int, d_model: int) -> int:
    """Forward FLOPs of attention proper in one layer, one sequence, all heads: the scores
    ``Q K^T`` and their product with ``V``, each ``2 * queries * keys * d_model``. Every
    query-key pair counts, causal or not (the convention of PaLM's model FLOPs)."""
    return 4 * queries * keys * d_model


def train_flops(forward_flops: float) -> float:
    """FLOPs of a training step from those of its forward pass.

    A matmul with a weight of P entries costs 2 P FLOPs per token forward (a multiply-add
    is 2 FLOPs) and twice that backward (the gradient of its input and of its weight), so
    6 P per token in all (Kaplan et al., 2020); attention's two matmuls scale alike. So a
    step is 3x its forward: ``6 * params_in_matmuls * tokens`` plus 3x the attention terms
    of :func:`attention_flops`. Embedding look-ups, LayerNorm, softmax, activations, the
    loss and the optimizer are not counted: the figure is a floor, the same for every
    candidate of a case (same shapes), so GFLOP/s ranks candidates as tokens/s does and
    says how much of the machine's matmul peak each one reaches.
    """
    return 3 * forward_flops


def gflops(flops: float, timing: Timing) -> float:
    return flops / timing.median_s / 1e9


def matmul_peak_gflops(repeats: int) -> float:
    """The machine's fp32 matmul peak: the fastest of ``repeats`` 2048 x 2048 ``torch.mm``."""
    a, b = torch.randn(PEAK_SIZE, PEAK_SIZE), torch.randn(PEAK_SIZE, PEAK_SIZE)
    out = torch.empty(PEAK_SIZE, PEAK_SIZE)
    (timing,) = interleaved([partial(torch.mm, a, b, out=out)], repeats, warmup=1)
    return 2 * PEAK_SIZE**3 / min(timing.samples_s) / 1e9


# ---- shared pieces -----------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A model and how to get its logits from the inputs of the case."""

    name: str
    model: nn.Module
    logits: Callable[..., Tensor]


def training_step(candidate: Candidate, inputs: tuple[Tensor, ...], targets: Tensor) -> Step:
    """One step: clear gradients, logits, cross-entropy against ``targets``, backward,
    AdamW. The step returns the loss."""
    optimizer = torch.optim.AdamW(candidate.model.parameters(), lr=LR)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        logits = candidate.logits(*inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def checked_loss(candidate: Candidate, timing: Timing) -> float:
    """The loss of the last timed step; raise unless it is finite."""
    if not math.isfinite(timing.last):
        raise RuntimeError(f"{candidate.name}: loss {timing.last} is not finite")
    return timing.last


def parameters(model: nn.Module) -> str:
    return f"{count_parameters(model, trainable_only=True) / 1e6:.2f}M parameters"


def training_figures(
    candidates: list[Candidate],
    batch: tuple[tuple[Tensor, ...], Tensor],
    flops: float,
    settings: Settings,
) -> list[Figure]:
    """Time the training steps of ``candidates`` on the same ``batch`` (inputs, targets),
    each step counting ``flops``; tokens/s counts the targets."""
    inputs, labels = batch
    steps = [training_step(c, inputs, labels) for c in candidates]
    first = [timed(step)[0] for step in steps]  # compiling, for the compiled candidate
    timings = interleaved(steps, settings.repeats_or(10, quick=2), settings.warmup)
    tokens = labels.numel()
    return [
        Figure(
            c.name,
            tokens / t.median_s,
            "tokens/s",
            t,
            gflops(flops, t),
            f"loss {checked_loss(c, t):.3f}, {parameters(c.model)}, first step {s:.1f} s",
        )
        for c, t, s in zip(candidates, timings, first, strict=True)
    ]


# ---- lm-train ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LMShape:
    vocab: int
    layers: int
    d_model: int
    heads: int
    d_ff: int
    context: int
    batch: int

    def __str__(self) -> str:
        return (
            f"vocab {self.vocab}, {self.layers} layers, d_model {self.d_model}, "
            f"{self.heads} heads, d_ff {self.d_ff}, context {self.context}, batch {self.batch}"
        )


LM_SHAPES = {
    "A": LMShape(vocab=65, layers=4, d_model=128, heads=4, d_ff=512, context=64, batch=12),
    "B": LMShape(vocab=8192, layers=6, d_model=384, heads=6, d_ff=1536, context=256, batch=8),
}
LM_TARGETS = [Target(TORCH, 1.25), Target(GPT2, 1.5)]


class TorchLM(nn.Module):
    """A causal LM from ``torch.nn``: token and learned position embeddings, a pre-LN
    ``nn.TransformerEncoder`` with a final LayerNorm, run with a causal mask and
    ``is_causal=True``, and a head tied to the token embedding."""

    def __init__(self, s: LMShape) -> None:
        super().__init__()
        self.tokens = nn.Embedding(s.vocab, s.d_model)
        self.positions = nn.Embedding(s.context, s.d_model)
        for table in (self.tokens, self.positions):  # GPT-2's, not N(0, 1): a sane first loss
            nn.init.normal_(table.weight, std=0.02)
        layer = nn.TransformerEncoderLayer(
            s.d_model,
            s.heads,
            s.d_ff,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        # pre-LN cannot use nested tensors; saying so spares a warning
        self.encoder = nn.TransformerEncoder(
            layer, s.layers, norm=nn.LayerNorm(s.d_model), enable_nested_tensor=False
        )
        causal = nn.Transformer.generate_square_subsequent_mask(s.context)
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, ids: Tensor) -> Tensor:
        length = ids.shape[1]
        x = self.tokens(ids) + self.positions(torch.arange(length, device=ids.device))
        hidden = self.encoder(x, mask=self.causal[:length, :length], is_causal=True)
        return F.linear(hidden, self.tokens.weight)


def lm_candidate(name: str, s: LMShape) -> Candidate:
    """Ours (eager or compiled), ``torch.nn``'s or Hugging Face's LM of shape ``s``, in
    training mode."""
    if name in (OURS, COMPILED):
        config = ModelConfig(
            arch="decoder",
            vocab_size=s.vocab,
            d_model=s.d_model,
            n_heads=s.heads,
            n_layers=s.layers,
            d_ff=s.d_ff,
            norm_first=True,
            positional="learned",
            activation="gelu",
            scale_embedding=False,
            tie_output=True,
            dropout=0.0,
            max_len=s.context,
        )
        ours = build_model(config).train()
        run = torch.compile(ours) if name == COMPILED else ours
        return Candidate(name, ours, lambda ids: run(ids).logits)
    if name == TORCH:
        model = TorchLM(s).train()
        return Candidate(name, model, model)
    config = GPT2Config(
        vocab_size=s.vocab,
        n_positions=s.context,
        n_embd=s.d_model,
        n_layer=s.layers,
        n_head=s.heads,
        n_inner=s.d_ff,
        activation_function="gelu",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    hf = GPT2LMHeadModel(config).train()
    return Candidate(name, hf, lambda ids: hf(ids, use_cache=False).logits)


def lm_batch(s: LMShape) -> tuple[tuple[Tensor, ...], Tensor]:
    """Random ``(batch, context)`` inputs and their next tokens as targets."""
    ids = torch.randint(0, s.vocab, (s.batch, s.context + 1), generator=seeded())
    return (ids[:, :-1],), ids[:, 1:]


def lm_train_flops(s: LMShape) -> float:
    """Training FLOPs of one step (:func:`train_flops`): the layers and the tied head
    (``vocab x d_model``) on every token, attention over ``context x context``."""
    params = s.layers * layer_matmul_params(s.d_model, s.d_ff) + s.vocab * s.d_model
    attention = s.batch * s.layers * attention_flops(s.context, s.context, s.d_model)
    return train_flops(2 * params * s.batch * s.context + attention)


def lm_train(settings: Settings) -> list[Row]:
    rows = []
    for case, s in LM_SHAPES.items():
        torch.manual_seed(0)
        names = (OURS, TORCH, GPT2, *our_variants(settings))
        candidates = [lm_candidate(name, s) for name in names]
        description = f"{s}; forward + backward + AdamW; HF attention: {hf_attention(candidates)}"
        figures = training_figures(candidates, lm_batch(s), lm_train_flops(s), settings)
        rows.append(
            Row(
                "lm-train",
                case,
                description,
                figures,
                LM_TARGETS,
                variants=our_variants(settings),
                peak_gflops=settings.peak_gflops,
            )
        )
        print_row(rows[-1])
    return rows


def our_variants(settings: Settings) -> tuple[str, ...]:
    """The other ways of running ours that the training workloads time."""
    return (COMPILED,) if settings.compile else ()


def hf_attention(candidates: list[Candidate]) -> str:
    """The attention implementation of the Hugging Face candidate (eager, sdpa...)."""
    return next(c.model for c in candidates if c.name in (GPT2, MARIAN)).config._attn_implementation


def seeded() -> torch.Generator:
    """The same random inputs for every workload and every run of this script."""
    return torch.Generator().manual_seed(0)


# ---- seq2seq-train -----------------------------------------------------------------------


@dataclass(frozen=True)
class Seq2SeqShape:
    vocab: int = 8000
    layers: int = 3
    """Encoder layers, and as many decoder layers."""
    d_model: int = 256
    heads: int = 8
    d_ff: int = 1024
    batch: int = 64
    src_len: int = 24
    tgt_len: int = 24
    dropout: float = 0.1

    def __str__(self) -> str:
        return (
            f"vocab {self.vocab} (shared), {self.layers}+{self.layers} layers, d_model "
            f"{self.d_model}, {self.heads} heads, d_ff {self.d_ff}, batch {self.batch} x "
            f"{self.src_len} source + {self.tgt_len} target tokens, dropout {self.dropout} "
            "everywhere (attention weights too)"
        )


SEQ2SEQ = Seq2SeqShape()
SEQ2SEQ_TARGETS = [Target(TORCH, 1.3), Target(MARIAN, 1.3)]


class TorchSeq2Seq(nn.Module):
    """The paper's model from ``torch.nn``: one embedding table for source, target and the
    output projection, scaled by sqrt(d_model), plus sinusoidal positions and dropout;
    ``nn.Transformer`` post-LN with ReLU, given stacks without the final LayerNorms it adds
    by default (post-LN has none, nor do ours and Marian's); a causal target mask."""

    def __init__(self, s: Seq2SeqShape) -> None:
        super().__init__()
        self.embedding = nn.Embedding(s.vocab, s.d_model)
        nn.init.normal_(self.embedding.weight, std=s.d_model**-0.5)  # ours: a sane first loss
        self.scale = s.d_model**0.5
        self.register_buffer("positions", sinusoidal_table(max(s.src_len, s.tgt_len), s.d_model))
        self.dropout = nn.Dropout(s.dropout)
        encoder_layer = nn.TransformerEncoderLayer(
            s.d_model, s.heads, s.d_ff, s.dropout, batch_first=True
        )
        decoder_layer = nn.TransformerDecoderLayer(
            s.d_model, s.heads, s.d_ff, s.dropout, batch_first=True
        )
        self.transformer = nn.Transformer(
            s.d_model,
            s.heads,
            custom_encoder=nn.TransformerEncoder(
                encoder_layer, s.layers, enable_nested_tensor=False
            ),
            custom_decoder=nn.TransformerDecoder(decoder_layer, s.layers),
            batch_first=True,
        )
        causal = nn.Transformer.generate_square_subsequent_mask(s.tgt_len)
        self.register_buffer("causal", causal, persistent=False)

    def embed(self, ids: Tensor) -> Tensor:
        return self.dropout(self.embedding(ids) * self.scale + self.positions[: ids.shape[1]])

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        length = tgt.shape[1]
        hidden = self.transformer(
            self.embed(src),
            self.embed(tgt),
            tgt_mask=self.causal[:length, :length],
            tgt_is_causal=True,
        )
        return F.linear(hidden, self.embedding.weight)


def seq2seq_candidates(s: Seq2SeqShape, variants: tuple[str, ...]) -> list[Candidate]:
    """Ours, ``torch.nn``'s and Marian, in training mode; and ours compiled, if asked."""
    config = ModelConfig(
        arch="seq2seq",
        vocab_size=s.vocab,
        d_model=s.d_model,
        n_heads=s.heads,
        n_layers=s.layers,
        n_decoder_layers=s.layers,
        d_ff=s.d_ff,
        dropout=s.dropout,
        attention_dropout=s.dropout,
        share_embeddings=True,
        tie_output=True,
    )
    ours = build_model(config).train()
    theirs = TorchSeq2Seq(s).train()
    marian_config = MarianConfig(
        vocab_size=s.vocab,
        d_model=s.d_model,
        encoder_layers=s.layers,
        decoder_layers=s.layers,
        encoder_attention_heads=s.heads,
        decoder_attention_heads=s.heads,
        encoder_ffn_dim=s.d_ff,
        decoder_ffn_dim=s.d_ff,
        activation_function="relu",
        dropout=s.dropout,
        attention_dropout=s.dropout,
        activation_dropout=s.dropout,
        scale_embedding=True,
        max_position_embeddings=max(s.src_len, s.tgt_len),
        pad_token_id=0,
        decoder_start_token_id=0,
        forced_eos_token_id=None,
    )
    marian = MarianMTModel(marian_config).train()
    candidates = [
        Candidate(OURS, ours, lambda src, tgt: ours(src, tgt).logits),
        Candidate(TORCH, theirs, theirs),
        Candidate(
            MARIAN,
            marian,
            lambda src, tgt: marian(input_ids=src, decoder_input_ids=tgt, use_cache=False).logits,
        ),
    ]
    if COMPILED in variants:
        fast = build_model(config).train()
        compiled = torch.compile(fast)
        candidates.append(Candidate(COMPILED, fast, lambda src, tgt: compiled(src, tgt).logits))
    return candidates


def seq2seq_batch(s: Seq2SeqShape) -> tuple[tuple[Tensor, ...], Tensor]:
    """Random source sentences, and target sentences: the decoder reads them shifted right
    and predicts them shifted left."""
    generator = seeded()
    src = torch.randint(0, s.vocab, (s.batch, s.src_len), generator=generator)
    tgt = torch.randint(0, s.vocab, (s.batch, s.tgt_len + 1), generator=generator)
    return (src, tgt[:, :-1]), tgt[:, 1:]


def seq2seq_train_flops(s: Seq2SeqShape) -> float:
    """Training FLOPs of one step (:func:`train_flops`). On source tokens: the encoder
    layers, and the keys and values of every decoder layer's cross-attention (2 d^2); on
    target tokens: the decoder layers' self-attention and feed-forward, the queries and
    output of cross-attention (2 d^2) and the tied output projection; attention over
    source x source, target x target and target x source."""
    d = s.d_model
    src_tokens, tgt_tokens = s.batch * s.src_len, s.batch * s.tgt_len
    on_source = s.layers * (layer_matmul_params(d, s.d_ff) + 2 * d * d)
    on_target = s.layers * (layer_matmul_params(d, s.d_ff) + 2 * d * d) + s.vocab * d
    attention = (
        s.batch
        * s.layers
        * (
            attention_flops(s.src_len, s.src_len, d)
            + attention_flops(s.tgt_len, s.tgt_len, d)
            + attention_flops(s.tgt_len, s.src_len, d)
        )
    )
    return train_flops(2 * (on_source * src_tokens + on_target * tgt_tokens) + attention)


def seq2seq_train(settings: Settings) -> list[Row]:
    torch.manual_seed(0)
    candidates = seq2seq_candidates(SEQ2SEQ, our_variants(settings))
    description = (
        f"{SEQ2SEQ}; post-LN, ReLU, sinusoidal positions, tied embeddings; tokens/s counts "
        f"target tokens; HF attention: {hf_attention(candidates)}"
    )
    batch, flops = seq2seq_batch(SEQ2SEQ), seq2seq_train_flops(SEQ2SEQ)
    figures = training_figures(candidates, batch, flops, settings)
    row = Row(
        "seq2seq-train",
        "",
        description,
        figures,
        SEQ2SEQ_TARGETS,
        variants=our_variants(settings),
        peak_gflops=settings.peak_gflops,
    )
    print_row(row)
    return [row]


# ---- generate ----------------------------------------------------------------------------


def generation(settings: Settings) -> list[Row]:
    """Greedy generation through ``benchmarks/generate.py``: its models, prompts and
    checked, interleaved runs; ours without the cache is left to that script."""
    cfg = gen.Config(settings.new_tokens, settings.repeats_or(3, quick=1), 0, settings.threads)
    torch.manual_seed(0)
    mine, theirs = gen.our_model(), gen.hf_model()
    description = (
        f"{gen.N_LAYERS} layers, d_model {gen.D_MODEL}, {gen.N_HEADS} heads, d_ff {gen.D_FF}, "
        f"vocab {gen.VOCAB}, GELU tanh, {gen.MAX_LEN} positions; prompt {cfg.prompt_len}, "
        f"{cfg.new_tokens} new tokens a row, greedy, never stopped early"
    )
    rows = []
    for batch, bound in GENERATE_TARGETS.items():
        figures = [
            Figure(
                r.candidate,
                r.tokens_per_s,
                "tokens/s",
                r.timing,
                note=f"{batch} x {r.new_tokens} new tokens, all generated",
            )
            for r in gen.run_batch(cfg, batch, mine, theirs)
        ]
        rows.append(
            Row(
                "generate",
                f"batch {batch}",
                description,
                figures,
                [Target(gen.HF, bound)],
                ours=gen.CACHED,
            )
        )
        print_row(rows[-1])
    return rows


# ---- encoder-infer -----------------------------------------------------------------------


@dataclass(frozen=True)
class EncoderShape:
    vocab: int = 8000
    layers: int = 4
    d_model: int = 256
    heads: int = 4
    d_ff: int = 1024
    batch: int = 32
    max_len: int = 64
    labels: int = 2


ENCODER = EncoderShape()


class TorchClassifier(nn.Module):
    """A sentence classifier from ``torch.nn``: token and learned position embeddings, a
    post-LN ``nn.TransformerEncoder`` with nested tensors enabled (its inference fast
    path skips padding), mean pooling over real tokens and a linear layer."""

    def __init__(self, s: EncoderShape) -> None:
        super().__init__()
        self.tokens = nn.Embedding(s.vocab, s.d_model)
        self.positions = nn.Embedding(s.max_len, s.d_model)
        layer = nn.TransformerEncoderLayer(s.d_model, s.heads, s.d_ff, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, s.layers, enable_nested_tensor=True)
        self.proj = nn.Linear(s.d_model, s.labels)

    def forward(self, ids: Tensor, mask: Tensor) -> Tensor:
        """``mask``: True at real tokens."""
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
        hidden = self.encoder(x, src_key_padding_mask=~mask)
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return self.proj((hidden * weights).sum(dim=1) / weights.sum(dim=1))


def encoder_batch(s: EncoderShape) -> tuple[Tensor, Tensor]:
    """Token ids ``(batch, longest)`` of random lengths in 1..max_len, padded with 0 at the
    end, and the mask of real tokens."""
    generator = seeded()
    lengths = torch.randint(1, s.max_len + 1, (s.batch,), generator=generator)
    mask = torch.arange(int(lengths.max()))[None, :] < lengths[:, None]
    ids = torch.randint(1, s.vocab, mask.shape, generator=generator)
    return ids.masked_fill(~mask, 0), mask


def encoder_infer_flops(s: EncoderShape, mask: Tensor) -> float:
    """Forward FLOPs of the useful work, on real tokens only: the layers on every real
    token, attention over each sentence's length squared, the classifier on the pooled
    vectors. Padding is not counted: a candidate that computes it does more for nothing."""
    lengths = mask.sum(dim=1).tolist()
    layers = sum(
        2 * layer_matmul_params(s.d_model, s.d_ff) * n + attention_flops(n, n, s.d_model)
        for n in lengths
    )
    return s.layers * layers + 2 * s.d_model * s.labels * len(lengths)


def inference(model: nn.Module, logits: Callable[[], Tensor], shape: tuple[int, ...]) -> Step:
    """A forward under ``torch.inference_mode``; raise unless the logits are finite and of
    ``shape``."""

    def step() -> None:
        with torch.inference_mode():
            out = logits()
        if out.shape != shape or not torch.isfinite(out).all():
            raise RuntimeError(f"{type(model).__name__}: logits of shape {tuple(out.shape)}")

    return step


def encoder_infer(settings: Settings) -> list[Row]:
    s = ENCODER
    torch.manual_seed(0)
    config = ModelConfig(
        arch="encoder",
        vocab_size=s.vocab,
        d_model=s.d_model,
        n_heads=s.heads,
        n_layers=s.layers,
        d_ff=s.d_ff,
        positional="learned",
        scale_embedding=False,
        max_len=s.max_len,
        head="classification",
        num_labels=s.labels,
    )
    ours, theirs = build_model(config).eval(), TorchClassifier(s).eval()
    ids, mask = encoder_batch(s)
    shape = (s.batch, s.labels)
    steps = [
        inference(ours, lambda: ours(ids, mask).logits, shape),
        inference(theirs, lambda: theirs(ids, mask), shape),
    ]
    timings = interleaved(steps, settings.repeats_or(20, quick=3), settings.warmup)
    flops, real = encoder_infer_flops(s, mask), int(mask.sum())
    fast_path = "on" if theirs.encoder.use_nested_tensor else "OFF"
    notes = [parameters(ours), f"{parameters(theirs)}, nested-tensor fast path {fast_path}"]
    figures = [
        Figure(name, real / t.median_s, "tokens/s", t, gflops(flops, t), note)
        for name, t, note in zip((OURS, TORCH), timings, notes, strict=True)
    ]
    description = (
        f"vocab {s.vocab}, {s.layers} layers, d_model {s.d_model}, {s.heads} heads, d_ff "
        f"{s.d_ff}, post-LN, {s.labels} classes, mean pooling; eval, inference_mode; batch "
        f"{s.batch} padded to {ids.shape[1]}, {real} real tokens (tokens/s counts these)"
    )
    row = Row(
        "encoder-infer",
        "",
        description,
        figures,
        [Target(TORCH, 1.0)],
        peak_gflops=settings.peak_gflops,
    )
    print_row(row)
    return [row]


# ---- translate ---------------------------------------------------------------------------


def translation_model() -> tuple[TranslationTask, nn.Module, str]:
    """The trained ``multi30k-de-en`` run, or a random model of its recipe's shape (with a
    tokenizer learnt from the training data) if it has no weights; and which it is."""
    if (TRANSLATE_RUN / MODEL_FILE).exists():
        task, model = load_run(TRANSLATE_RUN)
        return task, model, f"trained run {TRANSLATE_RUN.relative_to(ROOT)}"
    task = build_task(Recipe.load(TRANSLATE_RECIPE))
    task.prepare()
    model = build_model(task.model_config()).eval()
    return task, model, f"random weights of {TRANSLATE_RECIPE.relative_to(ROOT)} (no trained run)"


def translation(settings: Settings) -> list[Row]:
    sentences = read_lines(dataset_file("multi30k", "test_2016_flickr", lang="de"))
    if settings.quick:
        sentences = sentences[:QUICK_SENTENCES]
    torch.manual_seed(0)
    task, model, which = translation_model()

    def run(use_cache: bool) -> Step:
        def step() -> list[str]:
            out = translate(task, model, sentences, beam_size=BEAM, use_cache=use_cache)
            if len(out) != len(sentences):
                raise RuntimeError(f"{len(sentences)} sentences gave {len(out)} translations")
            return out

        return step

    translate(task, model, sentences[:16], beam_size=BEAM)  # warm-up
    repeats = settings.repeats_or(3, quick=1)
    timings = interleaved([run(True), run(False)], [repeats, 1])  # without: minutes a run
    empty = sum(not line for line in timings[0].last)
    note = f"{len(sentences)} sentences, {empty} empty translations; {parameters(model)}"
    differ = sum(a != b for a, b in zip(timings[0].last, timings[1].last, strict=True))
    cached, uncached = f"{OURS}, KV cache", f"{OURS}, no cache"
    figures = [
        Figure(name, len(sentences) / timing.median_s, "sentences/s", timing, note=note)
        for name, timing in zip((cached, uncached), timings, strict=True)
    ]
    row = Row(
        "translate",
        f"beam {BEAM}",
        f"Multi30k test_2016_flickr German -> English, {which}, batches of 64 sorted by length",
        figures,
        [Target(uncached, 1.0)],
        ours=cached,
        remark=f"{differ} of {len(sentences)} translations differ with and without the cache "
        "(float rounding can flip a near-tie)",
    )
    print_row(row)
    return [row]


# ---- memory ------------------------------------------------------------------------------


def max_rss_mib() -> float:
    """The peak resident memory of this process so far: Linux's ``VmHWM``. Not
    ``getrusage``'s ``ru_maxrss``, which keeps the peak of the parent that forked the child,
    the whole benchmark with its models, across ``exec``."""
    status = Path("/proc/self/status").read_text()
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(kib) / 1024


def lm_train_b_step(name: str, settings: Settings) -> Step:
    """A training step of candidate ``name`` at size B, on its batch."""
    shape = LM_SHAPES["B"]
    return training_step(lm_candidate(name, shape), *lm_batch(shape))


def generation_step(name: str, settings: Settings) -> Step:
    """A checked greedy generation by candidate ``name`` of ``benchmarks/generate.py`` at
    batch 8."""
    batch = 8
    prompts = torch.randint(1, gen.VOCAB, (batch, gen.PROMPT_LEN), generator=seeded())
    run = (
        gen.ours(gen.our_model(), prompts, use_cache=True)
        if name == gen.CACHED
        else gen.hugging_face(gen.hf_model(), prompts)
    )
    return partial(gen.checked_run, gen.Candidate(name, run, 1), settings.new_tokens, batch)


@dataclass(frozen=True)
class MemoryCase:
    candidates: tuple[str, ...]
    """Ours first."""
    runs: str
    """What a run is, for the description."""
    build: Callable[[str, Settings], Step]
    """The run of a candidate, its model and inputs built."""


MEMORY_CASES = {
    "lm-train B": MemoryCase((OURS, TORCH, GPT2), "training steps", lm_train_b_step),
    "generate batch 8": MemoryCase((gen.CACHED, gen.HF), "generations", generation_step),
}


def memory_child(spec: str, settings: Settings) -> dict[str, float]:
    """In a fresh process: build candidate ``spec`` (``case/candidate``) and its inputs,
    note the peak memory, run it ``settings.memory_runs`` times, note the peak again."""
    case, name = spec.split("/", 1)
    torch.manual_seed(0)
    step = MEMORY_CASES[case].build(name, settings)
    baseline = max_rss_mib()
    for _ in range(settings.memory_runs):
        step()
    return {"baseline_mib": baseline, "peak_mib": max_rss_mib()}


def measured_in_child(spec: str, settings: Settings) -> dict[str, float]:
    """Run :func:`memory_child` in a fresh interpreter; its last line of output is JSON."""
    command = [sys.executable, __file__, "--memory-child", spec, "--threads", str(settings.threads)]
    if settings.quick:
        command.append("--quick")
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.splitlines()[-1])


def memory(settings: Settings) -> list[Row]:
    rows = []
    for case, spec in MEMORY_CASES.items():
        figures = []
        for name in spec.candidates:
            child = measured_in_child(f"{case}/{name}", settings)
            growth = child["peak_mib"] - child["baseline_mib"]
            note = f"total peak {child['peak_mib']:,.0f} MiB, {child['baseline_mib']:,.0f} before"
            figures.append(Figure(name, growth, "MiB", note=note))
        description = (
            f"max RSS growth over {settings.memory_runs} {spec.runs}, each candidate in a "
            "fresh process (peak after the runs minus peak after imports, model and inputs)"
        )
        ours, *others = spec.candidates
        targets = [Target(name, 1.0, higher_is_better=False) for name in others]
        rows.append(Row("memory", case, description, figures, targets, ours=ours))
        print_row(rows[-1])
    return rows


# ---- report ------------------------------------------------------------------------------

WORKLOADS: dict[str, Callable[[Settings], list[Row]]] = {
    "lm-train": lm_train,
    "seq2seq-train": seq2seq_train,
    "generate": generation,
    "encoder-infer": encoder_infer,
    "translate": translation,
    "memory": memory,
}


def print_header(settings: Settings, workloads: list[str]) -> None:
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} threads, fp32, CPU only (GPU figures are not measured here)"
    )
    print(
        f"workloads: {', '.join(workloads)}; fp32 matmul peak {settings.peak_gflops:.1f} "
        f"GFLOP/s (fastest {PEAK_SIZE}x{PEAK_SIZE} torch.mm)"
    )
    print(
        "median of interleaved runs after a warm-up; spread = IQR / median (range / median "
        "under 4 runs); ratio = ours / this candidate (MiB for memory)"
    )
    if settings.quick:
        print("QUICK mode: a check that everything runs, not figures to quote")
    warning = load_warning()
    if warning is not None:
        print(warning)


def print_row(row: Row) -> None:
    """The case's title, then a line per candidate: its figure, the achieved GFLOP/s and
    share of the matmul peak (rows that count FLOPs), the spread (timed rows), the ratio
    ours / this candidate with the target, and a note on the work it did."""
    print(f"\n{row.title}: {row.description}")
    counts_flops = row.peak_gflops is not None
    timed = any(f.timing is not None for f in row.figures)
    header = f"  {'candidate':<16} {row.figures[0].unit:>12}"
    header += f" {'GFLOP/s':>8} {'of peak':>8}" if counts_flops else ""
    header += f" {'spread':>7}" if timed else ""
    print(f"{header} {'ratio':>7}  {'target':<8} {'':<6}  note")
    for f in row.figures:
        line = f"  {f.candidate:<16} {f.value:>12,.1f}"
        if f.gflops is not None and row.peak_gflops is not None:
            line += f" {f.gflops:>8.1f} {f.gflops / row.peak_gflops:>8.1%}"
        if timed:
            line += f" {f.spread:>7.1%}" if f.spread is not None else f" {'-':>7}"
        target = row.target_for(f.candidate)
        if target is None:
            line += f" {'':>7}  {'':<8} {'':<6}"
        else:
            ratio = row.ratio(target)
            line += f" {ratio:>6.2f}x  {target!s:<8} {'ok' if target.met(ratio) else 'MISSED':<6}"
        print(f"{line}  {f.note}")
    for variant in row.variants:
        ratios = []
        for t in row.targets:
            ratio = row.ratio(t, variant)
            ratios.append(f"{ratio:.2f}x {t.against} ({t} {'ok' if t.met(ratio) else 'MISSED'})")
        print(f"  {variant}: {', '.join(ratios)}")
    if row.remark:
        print(f"  {row.remark}")


def print_summary(rows: list[Row]) -> None:
    """Which targets were met, which missed, and whether the figures were noisy."""
    for variant in (None, COMPILED):
        name = variant or OURS
        results = [
            (row, t, row.ratio(t, variant))
            for row in rows
            if variant is None or variant in row.variants
            for t in row.targets
        ]
        missed = [(row, t, ratio) for row, t, ratio in results if not t.met(ratio)]
        if results:
            print(f"\ntargets of {name}: {len(results) - len(missed)} of {len(results)} met")
        for row, t, ratio in missed:
            print(f"  MISSED {row.title}: {name} / {t.against} {ratio:.2f}x, target {t}")
    spreads = [f.spread for row in rows for f in row.figures if f.spread is not None]
    if any(spread > NOISY_SPREAD for spread in spreads):
        print(f"note: spread above {NOISY_SPREAD:.0%}, the machine was busy; rerun when it is idle")


def write_json(path: Path, settings: Settings, rows: list[Row]) -> None:
    result = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "quick": settings.quick,
        "matmul_peak_gflop_per_s": settings.peak_gflops,
        "rows": [row.to_json() for row in rows],
    }
    path.write_text(json.dumps(result, indent=2) + "\n")


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()  # GPT-2's default eos id lies outside the vocab
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
    if args.memory_child is not None:
        settings = Settings(args.threads, args.quick, args.repeats)
        print(json.dumps(memory_child(args.memory_child, settings)))
        return
    workloads = args.workload or list(WORKLOADS)
    if "translate" in workloads:  # fail now, not after the other workloads
        dataset_file("multi30k", "test_2016_flickr", lang="de")
    peak = matmul_peak_gflops(2 if args.quick else 5)
    settings = Settings(args.threads, args.quick, args.repeats, peak, not args.no_compile)
    print_header(settings, workloads)
    rows = []
    for name in workloads:
        rows += WORKLOADS[name](settings)
    print_summary(rows)
    if args.json is not None:
        write_json(args.json, settings, rows)


if __name__ == "__main__":
    main()
