"""KernelQuantizedLinear: QuantizedLinear's buffers and state, its float32 products of a few
rows int8_matmul's on a CPU that runs the kernel, else written out eagerly, with the int8
values packed for compiled steps (the compiled products are tests/inference/test_quantize.py's)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import with_cpu_kernels
from scratchformer.kernels import KernelQuantizedLinear
from scratchformer.kernels.int8_matmul import int8_matmul
from scratchformer.kernels.packed import pack_columns
from scratchformer.kernels.quantized import INT8_ROWS
from scratchformer.nn import QuantizedLinear


def quantized(out_features: int, in_features: int, bias: bool) -> KernelQuantizedLinear:
    weight = torch.randn(out_features, in_features) / in_features**0.5
    bias_ = torch.randn(out_features) if bias else None
    return KernelQuantizedLinear.from_weight(weight, bias_)


def reference(layer: QuantizedLinear, x: torch.Tensor) -> torch.Tensor:
    """``F.linear`` in float32 with the dequantized weight."""
    return F.linear(x.float(), layer.dequantized(), layer.bias)


def plain(layer: KernelQuantizedLinear) -> QuantizedLinear:
    """The plain layer of the same buffers, whose product is written out."""
    return QuantizedLinear(layer.weight, layer.scales, layer.bias)


@with_cpu_kernels
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 8, INT8_ROWS])
def test_float32_products_of_a_few_rows_are_the_int8_kernel_s(rows: int, bias: bool) -> None:
    layer = quantized(96, 64, bias)
    assert layer.int8_products and layer.words is None  # (no words: nothing would read them)
    x = torch.randn(rows, 64)
    expected = int8_matmul(x, layer.weight, layer.scales)
    assert torch.equal(layer(x), expected if layer.bias is None else expected + layer.bias)
    error = (layer(x) - reference(layer, x)).norm() / reference(layer, x).norm()
    assert error < 0.015


@with_cpu_kernels
def test_more_rows_are_written_out() -> None:
    layer = quantized(96, 64, bias=True)
    x = torch.randn(2, INT8_ROWS, 64)  # (leading dimensions count)
    assert torch.equal(layer(x), plain(layer)(x))


@with_cpu_kernels
def test_bfloat16_products_are_written_out() -> None:
    layer = quantized(96, 64, bias=True)
    x = torch.randn(4, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(layer(x), plain(layer)(x))


@pytest.mark.parametrize("rows", [1, 8, 300])
@pytest.mark.usefixtures("written_out")
def test_without_the_kernel_eager_products_are_written_out(rows: int) -> None:
    """(The packed words are for compiled steps only.)"""
    layer = quantized(96, 64, bias=True)
    assert not layer.int8_products and layer.words is not None
    x = torch.randn(rows, 64)
    assert torch.equal(layer(x), plain(layer)(x))


@pytest.mark.usefixtures("written_out")
def test_only_maps_whose_columns_pack_keep_words_and_the_state_is_quantized_linear_s() -> None:
    assert quantized(8, 64, bias=True).words.dtype == torch.int32
    assert quantized(8, 6, bias=True).words is None
    assert list(quantized(8, 64, bias=True).state_dict()) == ["weight", "scales", "bias"]


@pytest.mark.usefixtures("written_out")
def test_loaded_int8_values_are_packed_afresh() -> None:
    """A quantized run is loaded into a model quantized from random weights: the words,
    which are not saved, must be those of the loaded values."""
    trained, fresh = quantized(8, 64, bias=True), quantized(8, 64, bias=True)
    fresh.load_state_dict(trained.state_dict())
    assert torch.equal(fresh.words, pack_columns(trained.weight))
