"""Encoder and decoder layers: sub-layers wrapped in dropout, a residual connection and
LayerNorm (paper sec. 3.1, 5.4), or RMSNorm (``norm="rms"``, Llama).

Post-LN, as in the paper: ``x = norm(x + dropout(sublayer(x)))``.
Pre-LN (``norm_first=True``), which trains deep stacks without warm-up tricks:
``x = x + dropout(sublayer(norm(x)))``.
"""

from __future__ import annotations

from torch import Tensor, nn

from .attention import CrossAttentionCache, MultiHeadAttention, SelfAttentionCache
from .dropout import Dropout
from .feedforward import FeedForward
from .norm import LayerNorm, centred_norm
from .packing import Packing
from .rotary import Rotation


class ResidualNorm(LayerNorm):
    """The LayerNorm (or RMSNorm: ``centred=False``) of a sub-layer with the sub-layer's
    dropout and residual connection,
    post-LN or pre-LN: the sub-layer reads :meth:`sublayer_input` of ``x``, and
    :meth:`residual` adds its output back. Its parameters are the norm's alone, so that a
    layer's ``*_norm.weight`` and ``*_norm.bias`` name them."""

    def __init__(
        self,
        d_model: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        eps: float = 1e-5,
        bias: bool = True,
        centred: bool = True,
    ) -> None:
        super().__init__(d_model, eps, bias, centred)
        self.norm_first = norm_first
        self.dropout = Dropout(dropout)

    def sublayer_input(self, x: Tensor) -> Tensor:
        """``norm(x)`` with pre-LN, else ``x``."""
        return self(x) if self.norm_first else x

    def residual(self, x: Tensor, sublayer_output: Tensor) -> Tensor:
        """``x + dropout(sublayer_output)``, normalised with post-LN."""
        x = x + self.dropout(sublayer_output)
        return x if self.norm_first else self(x)


class EncoderLayer(nn.Module):
    """Self-attention, then the position-wise feed-forward network."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        eps: float = 1e-5,
        bias: bool = True,
        n_kv_heads: int | None = None,
        qkv_bias: bool | None = None,
        gated: bool = False,
        norm: str = "layer",
    ) -> None:
        super().__init__()
        attention = {"n_kv_heads": n_kv_heads, "qkv_bias": qkv_bias}
        residual = (d_model, dropout, norm_first, eps, bias, centred_norm(norm))
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_dropout, bias, **attention)
        self.self_attn_norm = ResidualNorm(*residual)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation, bias, gated)
        self.feed_forward_norm = ResidualNorm(*residual)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        packing: Packing | None = None,
        rotation: Rotation | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``x``: ``(batch, len, d_model)``, or with ``packing`` the packed real tokens
        ``(tokens, d_model)``; ``mask``: True = may attend; ``rotation`` rotates queries and
        keys (rotary embeddings). Returns the new ``x`` and, if ``need_weights``, the
        attention weights ``(batch, heads, len, len)``."""
        h, weights = self.self_attn(
            self.self_attn_norm.sublayer_input(x),
            mask=mask,
            is_causal=is_causal,
            need_weights=need_weights,
            packing=packing,
            rotation=rotation,
        )
        x = self.self_attn_norm.residual(x, h)
        h = self.feed_forward(self.feed_forward_norm.sublayer_input(x))
        return self.feed_forward_norm.residual(x, h), weights


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention (queries from the decoder, keys and values
    from the encoder output), then the feed-forward network. With ``cross_attention=False``
    it is the block of a decoder-only (GPT-style) language model."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        eps: float = 1e-5,
        bias: bool = True,
        n_kv_heads: int | None = None,
        qkv_bias: bool | None = None,
        gated: bool = False,
        norm: str = "layer",
        cross_attention: bool = True,
    ) -> None:
        super().__init__()
        attention = {"n_kv_heads": n_kv_heads, "qkv_bias": qkv_bias}
        residual = (d_model, dropout, norm_first, eps, bias, centred_norm(norm))
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_dropout, bias, **attention)
        self.self_attn_norm = ResidualNorm(*residual)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation, bias, gated)
        self.feed_forward_norm = ResidualNorm(*residual)
        # cross-attention comes last in the parameter order (and the initialisation's
        # random draws), which checkpoints' optimizer states follow
        self.cross_attn: MultiHeadAttention | None = None
        self.cross_attn_norm: ResidualNorm | None = None
        if cross_attention:
            self.cross_attn = MultiHeadAttention(
                d_model, n_heads, attention_dropout, bias, cross=True, **attention
            )
            self.cross_attn_norm = ResidualNorm(*residual)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        is_causal: bool = True,
        need_weights: bool = False,
        self_cache: SelfAttentionCache | None = None,
        cross_cache: CrossAttentionCache | None = None,
        rotation: Rotation | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """``memory``: the encoder output ``(batch, src_len, d_model)``; ``self_mask`` and
        ``memory_mask`` mask target and source keys; the caches keep keys and values for
        incremental decoding; ``rotation`` rotates self-attention's queries and keys (rotary
        embeddings). Returns the new ``x`` and, if asked, the self- and cross-attention
        weights."""
        h, self_weights = self.self_attn(
            self.self_attn_norm.sublayer_input(x),
            mask=self_mask,
            is_causal=is_causal,
            need_weights=need_weights,
            cache=self_cache,
            rotation=rotation,
        )
        x = self.self_attn_norm.residual(x, h)
        cross_weights = None
        if self.cross_attn is not None and self.cross_attn_norm is not None:
            if memory is None:
                raise ValueError("this decoder layer has cross-attention and needs `memory`")
            h, cross_weights = self.cross_attn(
                self.cross_attn_norm.sublayer_input(x),
                memory,
                mask=memory_mask,
                need_weights=need_weights,
                cache=cross_cache,
            )
            x = self.cross_attn_norm.residual(x, h)
        h = self.feed_forward(self.feed_forward_norm.sublayer_input(x))
        return self.feed_forward_norm.residual(x, h), self_weights, cross_weights
