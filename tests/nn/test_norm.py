import pytest
import torch
from torch import nn

from scratchformer.nn import LayerNorm, layer_norm


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
