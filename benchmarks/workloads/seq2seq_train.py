"""The ``seq2seq-train`` workload: a training step of the paper's encoder-decoder."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import MarianConfig, MarianMTModel

from scratchformer import ModelConfig, build_model
from scratchformer.nn.embedding import sinusoidal_table
from workloads.flops import attention_flops, layer_matmul_params, train_flops
from workloads.report import (
    MARIAN,
    OURS,
    TORCH,
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
    marian = marian_model(s, max(s.src_len, s.tgt_len)).train()

    def marian_logits(src: Tensor, tgt: Tensor) -> Tensor:
        return marian(input_ids=src, decoder_input_ids=tgt, use_cache=False).logits

    loss_of = lambda run: lambda src, tgt, labels: run(src, tgt, labels=labels).loss  # noqa: E731
    candidates = [
        our_candidate(OURS, ours, loss_of),
        Candidate(TORCH, theirs, cross_entropy_of(theirs)),
        Candidate(MARIAN, marian, cross_entropy_of(marian_logits)),
    ]
    candidates += [our_candidate(name, build_model(config).train(), loss_of) for name in variants]
    return candidates


def marian_model(
    s: Seq2SeqShape, positions: int, pad_id: int = 0, bos_id: int = 0
) -> MarianMTModel:
    """Hugging Face's Marian of shape ``s`` (post-LN, ReLU, scaled embeddings shared by
    source, target and output, sinusoidal positions), random weights, in eval mode."""
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
        max_position_embeddings=positions,
        pad_token_id=pad_id,
        decoder_start_token_id=bos_id,
        forced_eos_token_id=None,
    )
    return MarianMTModel(marian_config).eval()


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
        machine=settings.machine,
    )
    print_row(row)
    return [row]
