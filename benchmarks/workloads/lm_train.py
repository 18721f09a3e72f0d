"""The ``lm-train`` workload: a training step of a decoder-only LM, sizes A and B."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GPT2Config, GPT2LMHeadModel

from scratchformer import ModelConfig, build_model
from workloads.machine import matmuls_gflops
from workloads.report import (
    BF16,
    COMPILED,
    GPT2,
    OURS,
    TORCH,
    TRAINER_ADAMW,
    Row,
    Settings,
    Target,
    print_row,
)
from workloads.training import (
    Candidate,
    cross_entropy_of,
    hf_attention,
    our_candidate,
    our_variants,
    seeded,
    training_figures,
)


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
LIMIT_TARGETS = {"B": 0.9}
"""Case: the fraction of the matmul peak (fp32, or bf16 for the bf16 variant) ours should
reach."""


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
    """Ours (eager, compiled or in bf16), ``torch.nn``'s or Hugging Face's LM of shape
    ``s``, in training mode."""
    if name in (OURS, COMPILED, TRAINER_ADAMW, BF16):
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
        loss_of = lambda run: lambda ids, labels: run(ids, labels=labels).loss  # noqa: E731
        return our_candidate(name, build_model(config).train(), loss_of)
    if name == TORCH:
        model = TorchLM(s).train()
        return Candidate(name, model, cross_entropy_of(model))
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
    return Candidate(name, hf, cross_entropy_of(lambda ids: hf(ids, use_cache=False).logits))


def lm_batch(s: LMShape) -> tuple[tuple[Tensor, ...], Tensor]:
    """Random ``(batch, context)`` inputs and their next tokens as targets."""
    ids = torch.randint(0, s.vocab, (s.batch, s.context + 1), generator=seeded())
    return (ids[:, :-1],), ids[:, 1:]


def lm_train_flops(s: LMShape) -> float:
    """Training FLOPs of one step: those of its matrix products (:func:`lm_step_matmuls`);
    the rest of the step (norms, softmax, activations, loss, optimizer) is not counted."""
    return sum(2 * b * m * k * n for b, m, k, n in lm_step_matmuls(s))


def lm_step_matmuls(s: LMShape) -> list[tuple[int, int, int, int]]:
    """The matrix products ``(batch, m, k, n)`` of a training step of shape ``s``. Forward,
    on every token: per layer Q/K/V (one ``d x 3d`` map), the attention output, the two
    feed-forward maps, and per head the scores ``Q K^T`` and their product with V (over all
    ``context x context`` pairs, causal or not: PaLM's model-FLOPs convention); then the
    tied head. Backward, each product ``A B`` gives two of the same size: the gradients of
    ``A`` and of ``B`` (so a step is 3x its forward, as in Kaplan et al., 2020)."""
    tokens, d, ctx = s.batch * s.context, s.d_model, s.context
    heads, d_head = s.batch * s.heads, s.d_model // s.heads
    layer = [
        (1, tokens, d, 3 * d),
        (1, tokens, d, d),
        (1, tokens, d, s.d_ff),
        (1, tokens, s.d_ff, d),
        (heads, ctx, d_head, ctx),
        (heads, ctx, ctx, d_head),
    ]
    forward = layer * s.layers + [(1, tokens, d, s.vocab)]
    backward = [shape for b, m, k, n in forward for shape in ((b, m, n, k), (b, k, m, n))]
    return forward + backward


def lm_train(settings: Settings) -> list[Row]:
    rows = []
    for case, s in LM_SHAPES.items():
        torch.manual_seed(0)
        names = (OURS, TORCH, GPT2, *our_variants(settings))
        candidates = [lm_candidate(name, s) for name in names]
        description = f"{s}; forward + backward + AdamW; HF attention: {hf_attention(candidates)}"
        figures = training_figures(candidates, lm_batch(s), lm_train_flops(s), settings)
        remark = matmul_ceiling(s, settings) if case in LIMIT_TARGETS else ""
        rows.append(
            Row(
                "lm-train",
                case,
                description,
                figures,
                LM_TARGETS,
                variants=our_variants(settings),
                machine=settings.machine,
                remark=remark,
                limit_target=LIMIT_TARGETS.get(case),
            )
        )
        print_row(rows[-1])
    return rows


def matmul_ceiling(s: LMShape, settings: Settings) -> str:
    """What the step's own matrix products reach alone, timed at its shapes, against the
    matmul peak: no step made of them and more work can reach a larger fraction."""
    assert settings.machine is not None
    shapes, repeats = lm_step_matmuls(s), settings.repeats_or(5, quick=2)
    ceilings = [("fp32", matmuls_gflops(shapes, torch.float32, repeats))]
    if settings.machine.bf16_peak_gflops is not None:
        ceilings.append(("bf16", matmuls_gflops(shapes, torch.bfloat16, repeats)))
    reached = ", ".join(
        f"{precision} {gflops:.1f} GFLOP/s = {gflops / settings.machine.peak(precision):.1%} "
        f"of the {precision} peak"
        for precision, gflops in ceilings
    )
    return f"the step's matrix products alone, at its shapes, reach {reached}"
