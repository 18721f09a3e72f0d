"""The encoder stack, and the encoder-only model: embeddings, encoder, one task head."""

from __future__ import annotations

from torch import Tensor, nn

from ..config import ModelConfig
from ..nn import padding_mask
from ..nn.packing import packing_for
from . import builder
from .base import ModelOutput, init_linear_weights, positioning_for
from .heads import Masked, Pooler, PretrainingHead


class Encoder(nn.Module):
    """``n_layers`` encoder layers and an optional final norm (needed with pre-LN); a
    positional scheme that positions attention (rotary) positions every layer's."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(builder.encoder_layer(config) for _ in range(config.n_layers))
        self.norm = builder.final_norm(config)
        self.output_dropout = builder.final_dropout(config)
        self.positional = builder.positional_attention(config, causal=False)

    def forward(
        self,
        x: Tensor,
        attention_mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, list[Tensor]]:
        """``x``: embedded input ``(batch, seq, d_model)``; ``attention_mask``: ``(batch, seq)``,
        1/True at real tokens. Returns the hidden states (zeros at padding) and the
        per-layer weights (empty unless ``need_weights``).

        The layers skip padding: they run on the packed real tokens, and only attention
        sees the padded shape (see :mod:`scratchformer.nn.packing`)."""
        mask = None if attention_mask is None else padding_mask(attention_mask)
        packing = None if need_weights else packing_for(attention_mask)
        positioning = positioning_for(self.positional, x)
        if packing is not None:
            x = packing.pack(x)
        weights = []
        for layer in self.layers:
            x, w = layer(
                x, mask, need_weights=need_weights, packing=packing, positioning=positioning
            )
            if w is not None:
                weights.append(w)
        if self.norm is not None:
            x = self.norm(x)
        if self.output_dropout is not None:
            x = self.output_dropout(x)
        return (x, weights) if packing is None else (packing.unpack(x), weights)


class EncoderModel(nn.Module):
    """Encoder-only model (BERT-style): token and position embeddings, the encoder, and the
    head named by ``config.head`` (none: the output is the hidden states); with
    ``config.pooler``, BERT's pooler gives ``pooler_output`` too."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.arch != "encoder":
            raise ValueError(f"arch={config.arch!r}: EncoderModel needs arch='encoder'")
        self.config = config
        self.embedding = builder.embedding(config, config.vocab_size)
        self.encoder = Encoder(config)
        self.pooler = Pooler(config.d_model) if config.pooler else None
        self.head = builder.head(config)
        init_linear_weights(self)
        if isinstance(self.head, PretrainingHead) and config.tie_output:
            self.head.tie(self.embedding.tokens.weight)

    def encode(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        need_weights: bool = False,
        token_type_ids: Tensor | None = None,
    ) -> tuple[Tensor, list[Tensor]]:
        """Hidden states ``(batch, seq, d_model)`` of ``(batch, seq)`` inputs, without the
        head, and the per-layer attention weights (empty unless ``need_weights``)."""
        x = self.embedding(input_ids, segments=token_type_ids)
        return self.encoder(x, attention_mask, need_weights)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        need_weights: bool = False,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        label_smoothing: float = 0.0,
        replacement_draws: Tensor | None = None,
    ) -> ModelOutput:
        """``input_ids``: ``(batch, seq)``; ``attention_mask``: 1/True at real tokens;
        ``token_type_ids``: segment ids (0 / 1) of a sentence pair. The similarity head
        compares rows ``2i`` and ``2i + 1``, each sentence encoded on its own. With
        ``labels`` (a pretraining head's: the original tokens where masked, ``IGNORE_INDEX``
        elsewhere) the output is the head's objective, and no logits are formed;
        ``replacement_draws`` are the ``rtd`` head's (see :mod:`.electra`)."""
        if labels is not None:
            if not isinstance(self.head, PretrainingHead):
                head = self.config.head
                raise ValueError(f"labels are for the pretraining heads (mlm, rtd), not {head=}")
            loss, hidden = self.head.objective(
                self,
                Masked(input_ids, labels, attention_mask, token_type_ids, replacement_draws),
                label_smoothing,
            )
            return ModelOutput(None, hidden, loss=loss)
        hidden, weights = self.encode(input_ids, attention_mask, need_weights, token_type_ids)
        logits = None if self.head is None else self.head(hidden, attention_mask)
        return ModelOutput(
            logits,
            hidden,
            {"encoder": weights} if need_weights else None,
            None if self.pooler is None else self.pooler(hidden),
        )
