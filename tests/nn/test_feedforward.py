import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP

from scratchformer.config import ModelConfig
from scratchformer.nn import FeedForward
from scratchformer.nn.feedforward import FEED_FORWARDS


@pytest.mark.parametrize(
    ("activation", "function"),
    [
        ("relu", F.relu),
        ("gelu", F.gelu),
        ("gelu_tanh", lambda x: 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x**3)))),
        ("silu", lambda x: x * torch.sigmoid(x)),
    ],
)
def test_feed_forward_is_two_linear_maps_around_the_activation(activation, function) -> None:
    ff = FeedForward(8, 32, activation=activation)
    x = torch.randn(2, 3, 8)
    hidden = function(x @ ff.w1.weight.T + ff.w1.bias)
    torch.testing.assert_close(ff(x), hidden @ ff.w2.weight.T + ff.w2.bias, atol=1e-5, rtol=0)


def test_gated_feed_forward_is_swiglu_by_hand() -> None:
    ff = FeedForward(8, 32, activation="silu", bias=False, gated=True)
    x = torch.randn(2, 3, 8)
    gate, up = x @ ff.w1.weight.T, x @ ff.w3.weight.T
    expected = (gate * torch.sigmoid(gate) * up) @ ff.w2.weight.T
    torch.testing.assert_close(ff(x), expected, atol=1e-5, rtol=0)
    assert sorted(ff.state_dict()) == ["w1.weight", "w2.weight", "w3.weight"]


def test_swiglu_matches_hugging_face_llama_mlp() -> None:
    theirs = LlamaMLP(LlamaConfig(hidden_size=48, intermediate_size=128, num_attention_heads=4))
    ours = FeedForward(48, 128, activation="silu", bias=False, gated=True)
    names = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}
    ours.load_state_dict(
        {f"{a}.weight": theirs.state_dict()[f"{b}.weight"] for a, b in names.items()}
    )
    x = torch.randn(3, 7, 48)
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=0)


def test_unknown_activation_is_named() -> None:
    with pytest.raises(ValueError, match="activation='swish'"):
        FeedForward(8, 32, activation="swish")


@pytest.mark.parametrize("gated", [False, True])
def test_the_network_of_a_config_has_its_widths_and_gating(gated: bool) -> None:
    config = ModelConfig(d_model=8, n_heads=2, d_ff=24, bias=False, gated=gated, dropout=0.25)
    ff = FEED_FORWARDS[config.feed_forward](config)
    assert ff.w1.weight.shape == (24, 8) and ff.w2.weight.shape == (8, 24)
    assert (ff.w3 is not None) == gated and ff.w1.bias is None and ff.dropout.p == 0.25
