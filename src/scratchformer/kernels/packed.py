"""Int8 values packed four to an int32 word, for compiled float32 products that read them.

Compiled with its weights frozen in, the written-out product of int8 values (``q``
converted to float32, a matmul) becomes a product with a float32 constant: the compiler
folds the conversion, and the step reads float32 weights. :func:`packed_product` instead
reads the int8 values packed four to a word (:func:`pack_columns`) and unpacks them by
shifts inside the one loop that Inductor fuses the product into. Words rather than bytes,
since Inductor loads as many elements of every dtype as a float vector holds. (Freezing
must not compute the shifts ahead either: ``inference/compiled.py`` keeps them in the
graph.)
"""

from __future__ import annotations

import torch
from torch import Tensor

BYTE_SHIFTS = (24, 16, 8)
"""Left shifts that bring byte ``j`` (0, 1, 2) of a word to its top, whence an arithmetic
right shift by 24 brings it back sign-extended (byte 3 is there already)."""


def pack_columns(q: Tensor) -> Tensor:
    """int8 values ``(out, in)`` as int32 words ``(out, in / 4)``: byte ``j`` (from the
    lowest) of word ``i`` holds column ``j * in / 4 + i``, so that each byte position of a
    row of words spans a contiguous quarter of the input."""
    out_features, in_features = q.shape
    if in_features % 4:
        raise ValueError(f"{in_features} columns do not pack four to a word")
    quarters = q.view(out_features, 4, in_features // 4).to(torch.int32) & 0xFF
    return sum(quarters[:, j] << (8 * j) for j in range(4))


def packed_product(x: Tensor, words: Tensor) -> Tensor:
    """``x @ q.T`` from ``q``'s :func:`pack_columns` ``words`` ``(out, in / 4)``: byte ``j``
    of every word (brought to the top by a left shift, back sign-extended by an arithmetic
    right shift) times quarter ``j`` of ``x``, the four products summed along the words.
    Inductor fuses it into one loop that loads each word once (run eagerly, it materialises
    the products: compiled use only)."""
    out_features, quarter = words.shape
    quarters = x.reshape(-1, 1, 4, quarter)
    total = quarters[..., 3, :] * (words >> 24).to(x.dtype)
    for j, shift in enumerate(BYTE_SHIFTS):
        total = total + quarters[..., j, :] * ((words << shift) >> 24).to(x.dtype)
    return total.sum(dim=-1).view(*x.shape[:-1], out_features)
