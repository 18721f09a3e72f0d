"""The ``lm-train`` workload: a training step of a decoder-only LM, sizes A and B."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GPT2Config, GPT2LMHeadModel

from scratchformer import ModelConfig, build_model
from workloads.flops import attention_flops, layer_matmul_params, train_flops
from workloads.report import (
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
    if name in (OURS, COMPILED, TRAINER_ADAMW):
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
