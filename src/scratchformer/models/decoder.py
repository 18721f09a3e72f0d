"""The decoder stack, and the decoder-only (GPT-style) language model."""

from __future__ import annotations

from torch import Tensor, nn

from ..config import ModelConfig
from ..nn import causal_mask, combine_masks, padding_mask
from . import builder
from .base import (
    DecoderCache,
    ModelOutput,
    cache_positions,
    init_linear_weights,
    lm_output,
    output_scale,
    positioning_for,
)
from .heads import LMHead


class Decoder(nn.Module):
    """``n_layers`` decoder layers (with or without cross-attention) and an optional final
    norm. Self-attention is always causal: position t sees positions <= t (only the last
    ``config.sliding_window`` of them, if set)."""

    def __init__(self, config: ModelConfig, n_layers: int, cross_attention: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            builder.decoder_layer(config, cross_attention) for _ in range(n_layers)
        )
        self.norm = builder.final_norm(config)
        self.output_dropout = builder.final_dropout(config)
        self.positional = builder.positional_attention(config, causal=True)
        self.sliding_window = config.sliding_window

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        attention_mask: Tensor | None = None,
        memory_attention_mask: Tensor | None = None,
        need_weights: bool = False,
        cache: DecoderCache | None = None,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """``x``: embedded target ``(batch, tgt_len, d_model)``; ``memory``: encoder output;
        the two attention masks are ``(batch, len)``, 1/True at real tokens. With a
        ``cache`` (``scratchformer.inference.DecoderCache``), ``x`` holds only the new
        positions and ``attention_mask`` covers all positions so far, the new ones included.
        ``positions``: ids of the new positions for the positional scheme, ``(seq,)`` or
        ``(batch, seq)`` (default: counting on from the cache's length). Returns the hidden
        states and the per-layer self- and cross-attention weights (empty lists unless
        ``need_weights``)."""
        new = x.shape[1]
        seen = new if cache is None else cache.length + new
        self_mask = None
        if attention_mask is not None or self.sliding_window is not None:
            # padding and causality combined once for all layers
            self_mask = combine_masks(
                None if attention_mask is None else padding_mask(attention_mask),
                causal_mask(new, seen, device=x.device, window=self.sliding_window),
            )
        memory_mask = None
        if memory_attention_mask is not None:
            memory_mask = padding_mask(memory_attention_mask)
        positioning = positioning_for(self.positional, x, cache, positions)
        self_weights, cross_weights = [], []
        for i, layer in enumerate(self.layers):
            x, sw, cw = layer(
                x,
                memory,
                self_mask=self_mask,
                memory_mask=memory_mask,
                is_causal=self_mask is None,
                need_weights=need_weights,
                self_cache=None if cache is None else cache.self_attn[i],
                cross_cache=None if cache is None else cache.cross_attn[i],
                positioning=positioning,
            )
            if sw is not None:
                self_weights.append(sw)
            if cw is not None:
                cross_weights.append(cw)
        if self.norm is not None:
            x = self.norm(x)
        if self.output_dropout is not None:
            x = self.output_dropout(x)
        return x, self_weights, cross_weights


class DecoderModel(nn.Module):
    """Decoder-only language model: embeddings, causal self-attention layers (no
    cross-attention), and an LM head, tied to the token embedding when
    ``config.tie_output``. Use ``norm_first=True`` for the GPT-2 layout."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.arch != "decoder":
            raise ValueError(f"arch={config.arch!r}: DecoderModel needs arch='decoder'")
        self.config = config
        self.embedding = builder.embedding(config, config.vocab_size)
        self.decoder = Decoder(config, config.n_layers, cross_attention=False)
        self.lm_head = LMHead(config.d_model, config.vocab_size)
        self.output_scale = output_scale(config)
        init_linear_weights(self)
        if config.tie_output:
            self.lm_head.weight = self.embedding.tokens.weight

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        need_weights: bool = False,
        cache: DecoderCache | None = None,
        positions: Tensor | None = None,
        labels: Tensor | None = None,
        label_smoothing: float = 0.0,
    ) -> ModelOutput:
        """``input_ids``: ``(batch, seq)``; ``attention_mask``: 1/True at real tokens.
        ``logits[:, t]`` predicts token ``t + 1``. With a ``cache``, ``input_ids`` are the
        new tokens only and ``attention_mask`` covers all tokens so far. ``positions``:
        position ids ``(batch, seq)`` (default: counting on from the cache's length; left-
        padded prompts pass their own so that every row starts at position 0).
        With ``labels`` ``(batch, seq)``, where ``labels[:, t]`` is the token position ``t``
        predicts (already shifted, unlike Hugging Face's; -100 where none counts), the output
        holds their mean cross-entropy as ``loss`` in place of the logits."""
        positions = cache_positions(input_ids, cache, positions)
        x = self.embedding(input_ids, positions=positions)
        hidden, weights, _ = self.decoder(
            x,
            attention_mask=attention_mask,
            need_weights=need_weights,
            cache=cache,
            positions=positions,
        )
        attentions = {"decoder": weights} if need_weights else None
        return lm_output(
            self.lm_head, hidden, attentions, labels, label_smoothing, self.output_scale
        )
