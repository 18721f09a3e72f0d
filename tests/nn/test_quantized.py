"""QuantizedLinear: int8 weights with a scale per output row, whose product (written out:
the int8 values as floats, a matmul, the scales) equals ``F.linear`` with the dequantized
weight. Its products in the project's kernels are tests/kernels/test_quantized.py's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from scratchformer.nn import QuantizedLinear
from scratchformer.nn.quantized import quantize_rows


def quantized(out_features: int, in_features: int, bias: bool) -> QuantizedLinear:
    weight = torch.randn(out_features, in_features) / in_features**0.5
    return QuantizedLinear.from_weight(weight, torch.randn(out_features) if bias else None)


def reference(layer: QuantizedLinear, x: torch.Tensor) -> torch.Tensor:
    """``F.linear`` in float32 with the dequantized weight."""
    return F.linear(x.float(), layer.dequantized(), layer.bias)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 8, 300])
def test_the_product_is_that_of_the_dequantized_weight(rows: int, bias: bool) -> None:
    layer = quantized(96, 64, bias)
    x = torch.randn(rows, 64)
    torch.testing.assert_close(layer(x), reference(layer, x), rtol=1e-5, atol=1e-5)
    batched = x.view(1, rows, 64).expand(2, rows, 64)  # leading dimensions, not contiguous
    assert layer(batched).shape == (2, rows, 96)
    torch.testing.assert_close(layer(batched)[1], reference(layer, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 8, 300])
def test_bfloat16_inputs_give_bfloat16_within_its_rounding(rows: int) -> None:
    layer = quantized(96, 64, bias=True)
    x = torch.randn(rows, 64).bfloat16()
    out = layer(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), reference(layer, x), rtol=2e-2, atol=2e-2)


def test_under_bfloat16_autocast_float32_inputs_give_the_bfloat16_product() -> None:
    """Autocast's dtype, not the input's, is the product's: the form that compiles to an
    int8 kernel (see the module docstring)."""
    layer = quantized(96, 64, bias=True)
    x = torch.randn(8, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, layer(x.bfloat16()))


def test_float64_inputs_give_float64() -> None:
    """Any float dtype: the int8 values are converted to it, as on CUDA."""
    layer = quantized(32, 48, bias=True)
    x = torch.randn(5, 48, dtype=torch.float64)
    out = layer(x)
    assert out.dtype == torch.float64
    expected = F.linear(x, layer.dequantized(torch.float64), layer.bias.double())
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_scales_and_values_of_a_hand_made_weight() -> None:
    weight = torch.tensor([[1.27, -0.635, 0.0], [0.1, 0.2, -0.254], [0.0, 0.0, 0.0]])
    q, scales = quantize_rows(weight)
    torch.testing.assert_close(scales, torch.tensor([0.01, 0.002, 0.0]))
    assert q.dtype == torch.int8
    assert q.tolist() == [[127, -64, 0], [50, 100, -127], [0, 0, 0]]  # -63.5 rounds to even


def test_a_zero_row_stays_zero_and_finite() -> None:
    weight = torch.randn(4, 16)
    weight[2] = 0
    layer = QuantizedLinear.from_weight(weight)
    assert layer.scales[2] == 0 and not layer.weight[2].any()
    out = layer(torch.randn(3, 16))
    assert torch.isfinite(out).all() and not out[:, 2].any()


def test_the_quantization_error_is_at_most_half_a_scale() -> None:
    weight = torch.randn(64, 128) * torch.logspace(-3, 1, 64)[:, None]  # rows of any size
    layer = QuantizedLinear.from_weight(weight)
    error = (layer.dequantized() - weight).abs()
    assert (error <= layer.scales[:, None] / 2 * (1 + 1e-6)).all()
    assert layer.weight.abs().amax(dim=1).eq(127).all()  # each row's largest reaches 127
    assert layer.weight.min() >= -127


def test_the_state_holds_int8_weights_and_float_scales() -> None:
    layer = quantized(6, 4, bias=True)
    state = layer.state_dict()
    assert list(state) == ["weight", "scales", "bias"]
    assert state["weight"].dtype == torch.int8 and state["weight"].shape == (6, 4)
    assert state["scales"].dtype == torch.float32 and state["scales"].shape == (6,)
    assert list(layer.parameters()) == []


def test_weights_that_are_not_int8_rows_are_refused() -> None:
    with pytest.raises(ValueError, match="int8"):
        QuantizedLinear(torch.zeros(3, 4), torch.ones(3))
    with pytest.raises(ValueError, match="scales"):
        QuantizedLinear(torch.zeros(3, 4, dtype=torch.int8), torch.ones(4))
