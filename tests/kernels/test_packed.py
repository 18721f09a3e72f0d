"""Int8 values packed four to an int32 word, and the product that unpacks them: that of the
int8 values."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from scratchformer.kernels.packed import pack_columns, packed_product
from scratchformer.nn.quantized import quantize_rows


def test_packed_words_hold_four_columns_a_quarter_apart() -> None:
    q = torch.tensor([[1, -1, 127, -127, 0, 2, -128, 5]], dtype=torch.int8)
    (words,) = pack_columns(q).tolist()
    # word i: columns i, i + 2, i + 4, i + 6 from its lowest byte up, each as two's complement
    assert [w & 0xFFFFFFFF for w in words] == [0x80007F01, 0x0502_81FF]
    with pytest.raises(ValueError, match="four to a word"):
        pack_columns(torch.zeros(2, 6, dtype=torch.int8))


@pytest.mark.parametrize("rows", [(1,), (3,), (2, 2)])
def test_the_packed_product_is_that_of_the_int8_values(rows: tuple[int, ...]) -> None:
    q, scales = quantize_rows(torch.randn(48, 64) / 8)
    x = torch.randn(*rows, 64)
    product = packed_product(x, pack_columns(q)) * scales  # (sums of up to 127 * |x| each)
    expected = F.linear(x, q.float() * scales[:, None])
    torch.testing.assert_close(product, expected, rtol=1e-5, atol=1e-5)
