import pytest
import torch
import torch.nn.functional as F

from scratchformer import config
from scratchformer.nn import FeedForward
from scratchformer.nn.feedforward import ACTIVATIONS


@pytest.mark.parametrize(
    ("activation", "function"),
    [
        ("relu", F.relu),
        ("gelu", F.gelu),
        ("gelu_tanh", lambda x: 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x**3)))),
    ],
)
def test_feed_forward_is_two_linear_maps_around_the_activation(activation, function) -> None:
    ff = FeedForward(8, 32, activation=activation)
    x = torch.randn(2, 3, 8)
    hidden = function(x @ ff.w1.weight.T + ff.w1.bias)
    torch.testing.assert_close(ff(x), hidden @ ff.w2.weight.T + ff.w2.bias, atol=1e-5, rtol=0)


def test_unknown_activation_is_named() -> None:
    with pytest.raises(ValueError, match="activation='swish'"):
        FeedForward(8, 32, activation="swish")


def test_every_configurable_activation_has_a_function() -> None:
    assert tuple(ACTIVATIONS) == config.ACTIVATIONS
