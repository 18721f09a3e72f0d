"""Token embeddings and positional encodings."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from . import init
from .dropout import Dropout


class TokenEmbedding(nn.Module):
    """Lookup table of token vectors, multiplied by sqrt(d_model) as in the paper (sec. 3.4).

    The scaling matters when the table is tied to the output projection: the weights are
    initialised with std d_model^-0.5, so scaled embeddings have unit variance.
    """

    def __init__(self, vocab_size: int, d_model: int, scale: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        self.scale = math.sqrt(d_model) if scale else 1.0
        init.normal_(self.weight, std=d_model**-0.5)

    def forward(self, ids: Tensor) -> Tensor:
        return nn.functional.embedding(ids, self.weight) * self.scale

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, {self.weight.shape[1]}, scale={self.scale:.4g}"


def position_ids(x: Tensor, positions: Tensor | None) -> Tensor:
    """The given position ids, else ``0 .. seq_len - 1`` for ``x`` ``(batch, seq, ...)``."""
    if positions is None:
        return torch.arange(x.shape[1], device=x.device)
    return positions


def inverse_frequencies(
    d: int, base: float = 10000.0, device: torch.device | None = None
) -> Tensor:
    """``base^(-2i/d)`` for ``i = 0 .. ceil(d/2) - 1``, in float64: how fast the angle of each
    pair of dimensions turns with the position, in the sinusoidal encoding and in the
    rotary embedding alike. ``2i`` is the even column index itself, so the exponent is
    ``column / d``."""
    return torch.pow(base, -torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)


def sinusoidal_encoding(positions: Tensor, d_model: int) -> Tensor:
    """``PE(pos, 2i) = sin(pos / 10000^(2i/d))``, ``PE(pos, 2i+1) = cos(pos / 10000^(2i/d))``
    at any position ids, ``(...)`` -> ``(..., d_model)``: the sine column and its cosine
    partner share one frequency. Computed in float64 on the ids' device, returned in
    float32."""
    inv_freq = inverse_frequencies(d_model, device=positions.device)
    angle = positions.to(torch.float64)[..., None] * inv_freq
    encoding = torch.empty(*angle.shape[:-1], d_model, dtype=torch.float64, device=angle.device)
    encoding[..., 0::2] = torch.sin(angle)
    encoding[..., 1::2] = torch.cos(angle[..., : d_model // 2])
    return encoding.float()


def sinusoidal_table(length: int, d_model: int) -> Tensor:
    """The encoding of positions ``0 .. length - 1``, ``(length, d_model)``."""
    return sinusoidal_encoding(torch.arange(length), d_model)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the paper's fixed sinusoidal encoding, then applies dropout.

    The encoding is computed from the position ids at every call (a few sines and cosines
    of ``seq x d_model``), so any position works and there is no table to keep or grow,
    compiled or not.
    """

    def __init__(self, d_model: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.d_model = d_model
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """``x``: ``(batch, seq, d_model)``; ``positions``: ``(seq,)`` or ``(batch, seq)`` ids."""
        encoding = sinusoidal_encoding(position_ids(x, positions), self.d_model)
        return self.dropout(x + encoding.to(x.dtype))


class LearnedPositionalEmbedding(nn.Module):
    """Adds a trained vector per position (BERT, GPT-2), then applies dropout."""

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        self.dropout = Dropout(dropout)
        init.normal_(self.weight, std=0.02)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        self.check_within_table(x, positions)
        return self.dropout(x + self.weight[position_ids(x, positions)])

    def check_within_table(self, x: Tensor, positions: Tensor | None) -> None:
        """ValueError for a position beyond ``max_len``.

        Under ``torch.compile`` given ids are not read: reading them from the data would
        split the compiled graph at every step. An id beyond the table then fails in the
        lookup instead (``generate`` checks positions against ``max_len`` before decoding).
        """
        if positions is None:
            needed = x.shape[1]
        elif torch.compiler.is_compiling() or not positions.numel():
            return
        else:
            needed = int(positions.max()) + 1
        if needed > self.weight.shape[0]:
            raise ValueError(
                f"position {needed - 1} is beyond max_len={self.weight.shape[0]} "
                "of the learned positional embedding"
            )


class Embedding(nn.Module):
    """Token embeddings plus the vectors of a positional scheme that adds them (none when
    the scheme positions attention instead, as rotary embeddings do), with dropout on the
    sum (paper sec. 5.4).

    ``segments``: a learned segment embedding added too (BERT's token types: which sentence
    of a pair a token belongs to). A ``norm`` (BERT's LayerNorm) applies to the sum before
    the dropout.
    """

    def __init__(
        self,
        tokens: TokenEmbedding,
        positions: nn.Module | None = None,
        *,
        segments: TokenEmbedding | None = None,
        norm: nn.Module | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.tokens = tokens
        self.segments = segments
        self.positions = positions
        self.norm = norm
        self.dropout = Dropout(dropout)

    def forward(
        self, ids: Tensor, positions: Tensor | None = None, segments: Tensor | None = None
    ) -> Tensor:
        """``ids``, ``positions`` and ``segments``: ``(batch, seq)``; no segments: all zero."""
        x = self.tokens(ids)
        if self.segments is not None:
            x = x + (self.segments.weight[0] if segments is None else self.segments(segments))
        elif segments is not None:
            raise ValueError("segment ids given to an embedding without segments")
        if self.positions is not None:
            x = self.positions(x, positions)
        return self.dropout(x if self.norm is None else self.norm(x))
