"""The ``encoder-infer`` workload: a classification forward on a padded batch, in fp32 and
with int8 weights."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from scratchformer import ModelConfig, build_model
from scratchformer.device import CPU, bf16_autocast, native_bf16
from scratchformer.inference import quantize
from timing import Step, interleaved
from workloads.flops import attention_flops, layer_matmul_params, per_second
from workloads.report import (
    INT8,
    OURS,
    TORCH,
    Figure,
    Row,
    Settings,
    Target,
    precision_of,
    print_row,
)
from workloads.training import parameters, seeded


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


def inference(
    model: nn.Module, logits: Callable[[], Tensor], shape: tuple[int, ...], bf16: bool = False
) -> Step:
    """A forward under ``torch.inference_mode`` (and bfloat16 autocast if ``bf16``); raise
    unless the logits are finite and of ``shape``."""

    def step() -> None:
        with torch.inference_mode(), bf16_autocast(CPU, bf16):
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
    int8, bf16 = quantize(copy.deepcopy(ours)), native_bf16(CPU)
    ids, mask = encoder_batch(s)
    shape = (s.batch, s.labels)
    steps = [
        inference(ours, lambda: ours(ids, mask).logits, shape),
        inference(theirs, lambda: theirs(ids, mask), shape),
        inference(int8, lambda: int8(ids, mask).logits, shape, bf16),
    ]
    timings = interleaved(steps, settings.repeats_or(20, quick=3), settings.warmup)
    flops, real = encoder_infer_flops(s, mask), int(mask.sum())
    fast_path = "on" if theirs.encoder.use_nested_tensor else "OFF"
    notes = [
        parameters(ours),
        f"{parameters(theirs)}, nested-tensor fast path {fast_path}",
        f"eager, {'bf16 autocast' if bf16 else 'fp32'}",
    ]
    figures = [
        Figure(
            name,
            real / t.median_s,
            "tokens/s",
            t,
            per_second(flops, t),
            note=note,
            precision=precision_of(name, bf16),
        )
        for name, t, note in zip((OURS, TORCH, INT8), timings, notes, strict=True)
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
        variants=(INT8,),
        machine=settings.machine,
    )
    print_row(row)
    return [row]
