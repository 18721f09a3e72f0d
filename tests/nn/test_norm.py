import pytest
import torch
from torch import nn
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from scratchformer.config import ModelConfig
from scratchformer.nn import LayerNorm, RMSNorm, layer_norm, rms_norm
from scratchformer.nn.norm import NORMS


def test_worked_example_against_torch_and_by_hand() -> None:
    x = torch.tensor([[2.0, -1.0, 3.0, 0.0]])
    # mean 1, biased variance 2.5: (x - 1) / sqrt(2.5 + eps)
    by_hand = torch.tensor([[1.0, -2.0, 2.0, -1.0]]) / (2.5 + 1e-5) ** 0.5
    expected = nn.LayerNorm(4)(x)
    torch.testing.assert_close(expected, by_hand)
    torch.testing.assert_close(LayerNorm(4)(x), expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(layer_norm(x, torch.ones(4), torch.zeros(4)), expected)


@pytest.mark.parametrize("bias", [True, False])
def test_written_out_and_module_match_torch_with_learned_parameters(bias: bool) -> None:
    theirs = nn.LayerNorm(64, eps=1e-6, bias=bias)
    with torch.no_grad():
        theirs.weight.normal_()
        if bias:
            theirs.bias.normal_()
    ours = LayerNorm(64, eps=1e-6, bias=bias)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(3, 5, 64) * 4 + 2
    expected = theirs(x)
    torch.testing.assert_close(ours(x), expected, atol=1e-5, rtol=0)
    written_out = layer_norm(x, ours.weight, ours.bias, ours.eps)
    torch.testing.assert_close(written_out, expected, atol=1e-5, rtol=0)


def test_unbiased_std_plus_eps_is_not_layer_norm() -> None:
    """The tutorial mistake gives visibly other numbers on a short vector."""
    x = torch.tensor([2.0, -1.0, 3.0, 0.0])
    wrong = (x - x.mean()) / (x.std() + 1e-5)
    assert not torch.allclose(wrong, nn.LayerNorm(4)(x), atol=1e-3)


def test_rms_norm_worked_example() -> None:
    x = torch.tensor([[3.0, -4.0]])  # mean square 12.5: no mean is subtracted
    expected = x / (12.5 + 1e-6) ** 0.5
    torch.testing.assert_close(RMSNorm(2)(x), expected)
    torch.testing.assert_close(rms_norm(x, torch.ones(2)), expected)


@pytest.mark.parametrize("eps", [1e-6, 1e-5, 0.1])
def test_rms_norm_matches_hugging_face_llama(eps: float) -> None:
    theirs = LlamaRMSNorm(64, eps=eps)
    with torch.no_grad():
        theirs.weight.normal_()
    ours = RMSNorm(64, eps=eps)
    ours.load_state_dict(theirs.state_dict())
    assert list(ours.state_dict()) == ["weight"]  # no bias
    x = torch.randn(3, 5, 64) * 4 + 2
    expected = theirs(x)
    torch.testing.assert_close(ours(x), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(rms_norm(x, ours.weight, eps), expected, atol=1e-5, rtol=0)


def test_rms_norm_normalises_bfloat16_in_float32_as_llama_does() -> None:
    theirs, ours = LlamaRMSNorm(64), RMSNorm(64)
    x = (torch.randn(2, 64) * 30).bfloat16()
    torch.testing.assert_close(ours(x), theirs(x), atol=0, rtol=0)  # dtypes included
    torch.testing.assert_close(ours.bfloat16()(x), theirs.bfloat16()(x), atol=0, rtol=0)


def test_norms_by_name_and_unknown_norm_is_named() -> None:
    config = ModelConfig(d_model=8, n_heads=2, layer_norm_eps=1e-6, bias=True)
    layer, rms = NORMS["layer"](config), NORMS["rms"](config)
    assert isinstance(layer, LayerNorm) and layer.centred and layer.bias is not None
    assert isinstance(rms, RMSNorm) and rms.bias is None and rms.eps == 1e-6
    assert layer.weight.shape == rms.weight.shape == (8,)
    with pytest.raises(ValueError, match="norm='batch' must be one of layer, rms"):
        NORMS["batch"]
