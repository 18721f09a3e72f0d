"""int8_matmul: each input row quantized to 7 bits, multiplied by int8 weights in int8, the
sums exact; held to the same computed in float64, to the dequantized weight's product
within the rounding of the input, and through torch.compile and torch.export. Where the
kernel cannot be built these tests skip, unless SCRATCHFORMER_REQUIRE_KERNELS=1."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import with_cpu_kernels
from scratchformer.kernels.int8_matmul import int8_matmul
from scratchformer.nn.quantized import quantize_rows

pytestmark = with_cpu_kernels


def reference(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The kernel's formula in float64: rows of ``x`` rounded to [-63, 63] on their own
    scale, exact integer sums, both scales."""
    row_scales = x.abs().amax(dim=-1, keepdim=True) / 63
    x_q = torch.round(x / torch.where(row_scales > 0, row_scales, 1.0))
    sums = x_q.double() @ q.double().T  # exact: integers far below 2**53
    return sums * row_scales.double() * scales.double()


def weights(out_features: int, in_features: int) -> tuple[torch.Tensor, torch.Tensor]:
    return quantize_rows(torch.randn(out_features, in_features) / in_features**0.5)


@pytest.mark.parametrize("in_features", [32, 64, 70, 7, 384])
@pytest.mark.parametrize("rows", [1, 3, 8, 9, 20])
def test_the_product_is_that_of_the_int8_rows(rows: int, in_features: int) -> None:
    """Every row count of the kernel's blocks of eight, and columns beyond whole 32-byte
    vectors."""
    q, scales = weights(50, in_features)
    x = torch.randn(rows, in_features) * torch.logspace(-3, 3, rows)[:, None]
    out = int8_matmul(x, q, scales)
    assert out.dtype == torch.float32 and out.shape == (rows, 50)
    expected = reference(x, q, scales)
    torch.testing.assert_close(out.double(), expected, rtol=1e-6, atol=1e-6 * expected.abs().max())


def test_the_rounding_of_the_input_costs_little_against_the_dequantized_weight() -> None:
    q, scales = weights(384, 1536)
    x = torch.randn(16, 1536)
    exact = F.linear(x, q.float() * scales[:, None])
    error = (int8_matmul(x, q, scales) - exact).norm(dim=-1) / exact.norm(dim=-1)
    assert error.max() < 0.03  # (about 2%: a rounding of each value by 1/126 of the largest)


@pytest.mark.parametrize("rows", [1, 8])
def test_the_largest_products_do_not_saturate(rows: int) -> None:
    """Inputs at their largest magnitude against weights at int8's ends, -128 included: the
    offset weights' pairs of products stay within int16, so the sums are still exact."""
    ends = [[127] * 64, [-128] * 64, [127, -128] * 32, [-128, 127] * 32]
    q = torch.tensor(ends, dtype=torch.int8)
    scales = torch.full((4,), 0.5)
    x = torch.tensor([1.0] * 32 + [-1.0] * 32).repeat(rows, 1)  # pairs at +-63 * 255 * 2
    out = int8_matmul(x, q, scales)
    torch.testing.assert_close(out.double(), reference(x, q, scales), rtol=0, atol=1e-9)


def test_rows_of_zeros_and_leading_dimensions() -> None:
    q, scales = weights(12, 64)
    x = torch.randn(3, 2, 64)
    x[1, 0] = 0
    out = int8_matmul(x.transpose(0, 1), q, scales)  # leading dimensions, not contiguous
    assert out.shape == (2, 3, 12)
    assert torch.isfinite(out).all() and not out[0, 1].any()
    torch.testing.assert_close(out, reference(x.transpose(0, 1), q, scales).float())


def test_inputs_it_does_not_take_get_a_clear_error() -> None:
    q, scales = weights(12, 64)
    with pytest.raises(RuntimeError, match="input must be float32"):
        int8_matmul(torch.randn(2, 64, dtype=torch.float64), q, scales)
    with pytest.raises(RuntimeError, match="input has 32 features, weight takes 64"):
        int8_matmul(torch.randn(2, 32), q, scales)
    with pytest.raises(RuntimeError, match="scales must be float32"):
        int8_matmul(torch.randn(2, 64), q, scales[:5])


class Product(torch.nn.Module):
    def __init__(self, q: torch.Tensor, scales: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("q", q)
        self.register_buffer("scales", scales)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return int8_matmul(x, self.q, self.scales).relu()


def test_compiled_and_exported_it_is_the_same_operator() -> None:
    product = Product(*weights(24, 64))
    x = torch.randn(2, 5, 64)
    eager = product(x)
    assert torch.equal(torch.compile(product, fullgraph=True)(x), eager)
    graph = torch.export.export(product, (x,)).graph_module.code
    assert "scratchformer.int8_matmul" in graph


def test_two_threads_split_the_weight_rows_as_one_does() -> None:
    q, scales = weights(203, 96)  # (an odd number of rows: tiles and a remainder per thread)
    x = torch.randn(5, 96)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = int8_matmul(x, q, scales)
        torch.set_num_threads(2)
        assert torch.equal(int8_matmul(x, q, scales), one)
    finally:
        torch.set_num_threads(threads)
