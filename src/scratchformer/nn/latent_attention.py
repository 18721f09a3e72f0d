"""Multi-head latent attention (MLA; DeepSeek-AI, 2024, "DeepSeek-V2"): every head's keys and
values are made from one low-rank latent vector a position, and that latent, not the heads'
keys and values, is what a decoding cache keeps.

A position's ``x`` is projected (``kv_a_proj``, DeepSeek's ``kv_a_proj_with_mqa``) to a
latent of ``kv_lora_rank`` numbers, normalised by RMSNorm, and to one key of
``qk_rope_head_dim`` numbers shared by all heads, the only part of a key that rotary
positions turn. ``kv_b_proj`` expands the latent into each head's key part without
positions (``qk_nope_head_dim``) and its value (``v_head_dim``). Queries come from
``q_proj``, or through a low-rank bottleneck of ``q_lora_rank`` (``q_a_proj`` -> RMSNorm ->
``q_b_proj``); each head's query has a part without positions and a rotated part. The scores
are scaled by ``1 / sqrt(qk_nope_head_dim + qk_rope_head_dim)``.

A cache keeps ``kv_lora_rank + qk_rope_head_dim`` numbers a position and layer, where
multi-head attention keeps ``2 * n_kv_heads * d_head``; each decoding step expands all the
cached latents through ``kv_b_proj`` again. (DeepSeek's inference folds ``kv_b_proj`` into
the queries and the output projection instead; here every projection stays a linear map of
its own, which LoRA and int8 quantization take like any other.)

Rotary layout: dimension ``i`` of the rotated part is paired with ``i + qk_rope_head_dim /
2``, as Hugging Face's ``DeepseekV3Attention`` pairs them with ``rope_interleave=False``.
DeepSeek's checkpoints pair ``2i`` with ``2i + 1`` (``rope_interleave=True``), which a
reordering of the rotated rows of the query and ``kv_a_proj`` weights maps to this one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .attention import (
    ATTENTIONS,
    Attention,
    CacheShapes,
    CrossAttentionCache,
    SelfAttentionCache,
)
from .linear import Linear
from .norm import RMSNorm
from .packing import Packing
from .positional import Rotation

if TYPE_CHECKING:
    from ..config import ModelConfig


class MultiHeadLatentAttention(Attention):
    """Self-attention whose keys and values come from a latent of ``kv_lora_rank`` numbers
    a position and one rotated key shared by the heads (see the module's docstring).
    ``qkv_bias`` (default: ``bias``) sets the biases of the maps from ``x`` that DeepSeek
    gives one (``q_a_proj``, ``kv_a_proj``), ``bias`` that of ``out_proj``; ``q_proj``,
    ``q_b_proj`` and ``kv_b_proj`` have none. ``eps``: the RMSNorms'."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        kv_lora_rank: int,
        qk_rope_head_dim: int,
        qk_nope_head_dim: int,
        v_head_dim: int,
        q_lora_rank: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        qkv_bias: bool | None = None,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(n_heads, dropout)
        self.q_lora_rank = q_lora_rank
        self.kv_lora_rank = kv_lora_rank
        self.qk_rope_head_dim = qk_rope_head_dim
        self.qk_nope_head_dim = qk_nope_head_dim
        self.v_head_dim = v_head_dim
        qkv_bias = bias if qkv_bias is None else qkv_bias
        q_width = n_heads * (qk_nope_head_dim + qk_rope_head_dim)
        if q_lora_rank is None:
            self.q_proj = Linear(d_model, q_width, bias=False)
        else:
            self.q_a_proj = Linear(d_model, q_lora_rank, bias=qkv_bias)
            self.q_a_norm = RMSNorm(q_lora_rank, eps)
            self.q_b_proj = Linear(q_lora_rank, q_width, bias=False)
        self.kv_a_proj = Linear(d_model, kv_lora_rank + qk_rope_head_dim, bias=qkv_bias)
        self.kv_a_norm = RMSNorm(kv_lora_rank, eps)
        kv_width = n_heads * (qk_nope_head_dim + v_head_dim)
        self.kv_b_proj = Linear(kv_lora_rank, kv_width, bias=False)
        self.out_proj = Linear(n_heads * v_head_dim, d_model, bias=bias)

    @classmethod
    def from_config(cls, config: ModelConfig, *, cross: bool = False) -> MultiHeadLatentAttention:
        """The self-attention of a model (there is no cross-attention of this kind)."""
        if cross:
            raise ValueError("attention='latent' has no cross-attention (it is self-attention)")
        return cls(
            config.d_model,
            config.n_heads,
            config.kv_lora_rank,
            config.qk_rope_head_dim,
            config.qk_nope_head_dim,
            config.v_head_dim,
            q_lora_rank=config.q_lora_rank,
            dropout=config.attention_dropout,
            bias=config.bias,
            qkv_bias=config.qkv_bias,
            eps=config.layer_norm_eps,
        )

    @property
    def cache_shapes(self) -> CacheShapes:
        """The normalised latent and the rotated key that the heads share, one of each a
        position."""
        return (1, self.kv_lora_rank), (1, self.qk_rope_head_dim)

    def project(
        self,
        x: Tensor,
        source: Tensor | None = None,
        cache: SelfAttentionCache | CrossAttentionCache | None = None,
        packing: Packing | None = None,
        rotation: Rotation | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Queries and keys ``(batch, heads, len, qk_nope_head_dim + qk_rope_head_dim)``,
        values ``(batch, heads, len, v_head_dim)``. With a cache, the new positions' latents
        and rotated keys are appended to it, and the keys and values of all positions are
        expanded from what it holds. Packed tokens are projected before they are
        unpacked."""
        if source is not None:
            raise ValueError("attention='latent' is self-attention: it takes no source")
        if self.q_lora_rank is None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_norm(self.q_a_proj(x)))
        compressed = self.kv_a_proj(x)
        if packing is not None:
            q, compressed = packing.unpack(q), packing.unpack(compressed)
        nope, rope = self.qk_nope_head_dim, self.qk_rope_head_dim
        q_nope, q_rope = self.split_heads(q, nope + rope).split([nope, rope], dim=-1)
        latent, k_rope = compressed[:, None].split([self.kv_lora_rank, rope], dim=-1)
        latent = self.kv_a_norm(latent)
        if rotation is not None:
            q_rope, k_rope = rotation.apply(q_rope), rotation.apply(k_rope)
        if cache is not None:
            latent, k_rope = cache.append(latent, k_rope)  # type: ignore[union-attr]
        kv = self.split_heads(self.kv_b_proj(latent[:, 0]), nope + self.v_head_dim)
        k_nope, v = kv.split([nope, self.v_head_dim], dim=-1)
        k = torch.cat([k_nope, k_rope.expand(-1, self.n_heads, -1, -1)], dim=-1)
        return torch.cat([q_nope, q_rope], dim=-1), k, v

    def split_heads(self, x: Tensor, width: int) -> Tensor:
        """``(batch, len, heads * width)`` -> ``(batch, heads, len, width)``."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, width).transpose(1, 2)


ATTENTIONS.add("latent", MultiHeadLatentAttention.from_config)
