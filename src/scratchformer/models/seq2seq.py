"""The encoder-decoder Transformer of "Attention Is All You Need"."""

from __future__ import annotations

from torch import Tensor, nn

from ..config import ModelConfig
from . import builder
from .base import (
    DecoderCache,
    ModelOutput,
    cache_positions,
    head_input,
    init_linear_weights,
    lm_output,
    output_scale,
)
from .decoder import Decoder
from .encoder import Encoder
from .heads import LMHead


class Seq2SeqModel(nn.Module):
    """Source embedding -> encoder; target embedding (the target shifted right, BOS first)
    -> decoder attending to the encoder output -> projection to target-vocabulary logits.

    ``share_embeddings`` uses one table for both languages (a joint vocabulary);
    ``tie_output`` ties the output projection to the target embedding.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.arch != "seq2seq":
            raise ValueError(f"arch={config.arch!r}: Seq2SeqModel needs arch='seq2seq'")
        self.config = config
        self.src_embedding = builder.embedding(config, config.vocab_size)
        self.tgt_embedding = (
            self.src_embedding
            if config.share_embeddings
            else builder.embedding(config, config.target_vocab_size)
        )
        self.encoder = Encoder(config)
        self.decoder = Decoder(config, config.decoder_layers, cross_attention=True)
        self.lm_head = LMHead(config.d_model, config.target_vocab_size)
        self.output_scale = output_scale(config)
        init_linear_weights(self)
        if config.tie_output:
            self.lm_head.weight = self.tgt_embedding.tokens.weight

    def encode(
        self, src_ids: Tensor, src_mask: Tensor | None = None, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor]]:
        """Encoder output ``(batch, src_len, d_model)`` and its attention weights."""
        return self.encoder(self.src_embedding(src_ids), src_mask, need_weights)

    def decode(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        need_weights: bool = False,
        cache: DecoderCache | None = None,
    ) -> tuple[Tensor, Tensor, list[Tensor], list[Tensor]]:
        """Logits ``(batch, tgt_len, tgt_vocab)``, the decoder's hidden states, and its self-
        and cross-attention weights. With a ``cache``, ``tgt_ids`` are the new tokens only
        (and ``tgt_mask``, if given, covers all target tokens so far). While the decoding
        kernels are installed (``scratchformer.inference.kernels``, as beam search does),
        ``memory`` (and ``src_mask``) may have fewer rows than ``tgt_ids``: each row then
        serves as many consecutive target rows (beam search's beams of a sentence)."""
        hidden, self_weights, cross_weights = self._decoder_states(
            tgt_ids, memory, src_mask, tgt_mask, need_weights, cache
        )
        logits = self.lm_head(head_input(hidden, self.output_scale))
        return logits, hidden, self_weights, cross_weights

    def _decoder_states(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        tgt_mask: Tensor | None,
        need_weights: bool,
        cache: DecoderCache | None = None,
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """The decoder's hidden states and its self- and cross-attention weights."""
        x = self.tgt_embedding(tgt_ids, positions=cache_positions(tgt_ids, cache, None))
        return self.decoder(x, memory, tgt_mask, src_mask, need_weights, cache)

    def forward(
        self,
        src_ids: Tensor,
        tgt_ids: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        need_weights: bool = False,
        labels: Tensor | None = None,
        label_smoothing: float = 0.0,
    ) -> ModelOutput:
        """``src_ids`` ``(batch, src_len)``, ``tgt_ids`` ``(batch, tgt_len)``: the decoder input;
        the masks are ``(batch, len)``, 1/True at real tokens. With ``labels`` ``(batch,
        tgt_len)``, the tokens to predict (-100 where none counts), the output holds their
        mean cross-entropy as ``loss`` in place of the logits."""
        memory, encoder_weights = self.encode(src_ids, src_mask, need_weights)
        hidden, self_weights, cross_weights = self._decoder_states(
            tgt_ids, memory, src_mask, tgt_mask, need_weights
        )
        attentions = None
        if need_weights:
            attentions = {
                "encoder": encoder_weights,
                "decoder": self_weights,
                "cross": cross_weights,
            }
        return lm_output(
            self.lm_head, hidden, attentions, labels, label_smoothing, self.output_scale
        )
