"""Encoder and decoder layers: sub-layers wrapped in dropout, a residual connection and a
norm (paper sec. 3.1, 5.4). A layer is given its attention and feed-forward modules and a
factory of its norms (LayerNorm, RMSNorm, ...), so that it knows none of their kinds.

Post-LN, as in the paper: ``x = norm(x + dropout(sublayer(x)))``.
Pre-LN (``norm_first=True``), which trains deep stacks without warm-up tricks:
``x = x + dropout(sublayer(norm(x)))``.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from .attention import Attention, CrossAttentionCache, SelfAttentionCache
from .dropout import Dropout
from .packing import Packing
from .positional import Positioning

Norm = Callable[[], nn.Module]
"""Makes one norm of the layer's width, e.g. ``partial(LayerNorm, d_model)``."""


class Residual(nn.Module):
    """The residual connections of a layer's sub-layers, post-LN or pre-LN, with dropout on
    each sub-layer's output: the sub-layer reads :meth:`sublayer_input` of ``x``, and
    :meth:`residual` adds its output back. Each sub-layer's norm is the layer's own
    attribute (``self_attn_norm``, ...), so that checkpoints name its parameters so."""

    def __init__(self, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.dropout = Dropout(dropout)

    def sublayer_input(self, x: Tensor, norm: nn.Module) -> Tensor:
        """``norm(x)`` with pre-LN, else ``x``."""
        return norm(x) if self.norm_first else x

    def residual(self, x: Tensor, sublayer_output: Tensor, norm: nn.Module) -> Tensor:
        """``x + dropout(sublayer_output)``, normalised with post-LN."""
        x = x + self.dropout(sublayer_output)
        return x if self.norm_first else norm(x)


class EncoderLayer(Residual):
    """Self-attention, then the position-wise feed-forward network."""

    def __init__(
        self,
        self_attn: Attention,
        feed_forward: nn.Module,
        norm: Norm,
        *,
        dropout: float = 0.1,
        norm_first: bool = False,
    ) -> None:
        super().__init__(dropout, norm_first)
        self.self_attn = self_attn
        self.self_attn_norm = norm()
        self.feed_forward = feed_forward
        self.feed_forward_norm = norm()

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        packing: Packing | None = None,
        positioning: Positioning | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``x``: ``(batch, len, d_model)``, or with ``packing`` the packed real tokens
        ``(tokens, d_model)``; ``mask``: True = may attend; ``positioning``: the positional
        scheme's rotation and score bias. Returns the new ``x`` and, if ``need_weights``,
        the attention weights ``(batch, heads, len, len)``."""
        rotation, bias = positioning or Positioning()
        h, weights = self.self_attn(
            self.sublayer_input(x, self.self_attn_norm),
            mask=mask,
            is_causal=is_causal,
            need_weights=need_weights,
            packing=packing,
            rotation=rotation,
            bias=bias,
        )
        x = self.residual(x, h, self.self_attn_norm)
        h = self.feed_forward(self.sublayer_input(x, self.feed_forward_norm))
        return self.residual(x, h, self.feed_forward_norm), weights


class DecoderLayer(Residual):
    """Masked self-attention, cross-attention (queries from the decoder, keys and values
    from the encoder output), then the feed-forward network. Without ``cross_attn`` it is
    the block of a decoder-only (GPT-style) language model."""

    def __init__(
        self,
        self_attn: Attention,
        cross_attn: Attention | None,
        feed_forward: nn.Module,
        norm: Norm,
        *,
        dropout: float = 0.1,
        norm_first: bool = False,
    ) -> None:
        super().__init__(dropout, norm_first)
        self.self_attn = self_attn
        self.self_attn_norm = norm()
        self.feed_forward = feed_forward
        self.feed_forward_norm = norm()
        # cross-attention comes last in the parameter order (and the initialisation's
        # random draws), which checkpoints' optimizer states follow
        self.cross_attn = cross_attn
        self.cross_attn_norm = None if cross_attn is None else norm()

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
        positioning: Positioning | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """``memory``: the encoder output ``(batch, src_len, d_model)``; ``self_mask`` and
        ``memory_mask`` mask target and source keys; the caches keep keys and values for
        incremental decoding; ``positioning``: the positional scheme's rotation and score
        bias for self-attention. Returns the new ``x`` and, if asked, the self- and
        cross-attention weights."""
        rotation, bias = positioning or Positioning()
        h, self_weights = self.self_attn(
            self.sublayer_input(x, self.self_attn_norm),
            mask=self_mask,
            is_causal=is_causal,
            need_weights=need_weights,
            cache=self_cache,
            rotation=rotation,
            bias=bias,
        )
        x = self.residual(x, h, self.self_attn_norm)
        cross_weights = None
        if self.cross_attn is not None and self.cross_attn_norm is not None:
            if memory is None:
                raise ValueError("this decoder layer has cross-attention and needs `memory`")
            h, cross_weights = self.cross_attn(
                self.sublayer_input(x, self.cross_attn_norm),
                memory,
                mask=memory_mask,
                need_weights=need_weights,
                cache=cross_cache,
            )
            x = self.residual(x, h, self.cross_attn_norm)
        h = self.feed_forward(self.sublayer_input(x, self.feed_forward_norm))
        return self.residual(x, h, self.feed_forward_norm), self_weights, cross_weights
