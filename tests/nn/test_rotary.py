"""Rotary embeddings against Hugging Face's (Llama's) and against their defining property."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from scratchformer.nn import RotaryEmbedding
from scratchformer.nn.rotary import RopeScaling


@pytest.mark.parametrize("d_head", [8, 32])
def test_matches_hugging_face_llama(d_head: int) -> None:
    torch.manual_seed(0)
    q, k = torch.randn(2, 3, 11, d_head), torch.randn(2, 3, 11, d_head)
    positions = torch.tensor([list(range(11)), list(range(5, 16))])  # a row starting at 5
    hf = LlamaRotaryEmbedding(
        LlamaConfig(hidden_size=3 * d_head, num_attention_heads=3, rope_theta=10000.0)
    )
    cos, sin = hf(q, positions)
    expected_q, expected_k = apply_rotary_pos_emb(q, k, cos, sin)
    rotation = RotaryEmbedding(d_head)(positions)
    torch.testing.assert_close(rotation.apply(q), expected_q, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(rotation.apply(k), expected_k, atol=1e-6, rtol=1e-5)


LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
SCALINGS = {
    "default": ({}, None),
    "linear": ({"rope_type": "linear", "factor": 4.0}, RopeScaling("linear", 4.0)),
    # an original length of 64 puts the head's frequencies on both sides of the blend
    "llama3": (
        {"rope_type": "llama3", **LLAMA3, "original_max_position_embeddings": 64},
        RopeScaling("llama3", 8.0, 1.0, 4.0, original_max_len=64),
    ),
}


@pytest.mark.parametrize("theta", [10000.0, 500000.0])
@pytest.mark.parametrize("name", SCALINGS)
def test_theta_and_scaling_match_hugging_face_llama(theta: float, name: str) -> None:
    torch.manual_seed(0)
    parameters, scaling = SCALINGS[name]
    config = LlamaConfig(
        hidden_size=128,
        num_attention_heads=4,
        max_position_embeddings=64,
        rope_parameters={"rope_type": "default", "rope_theta": theta, **parameters},
    )
    hf = LlamaRotaryEmbedding(config)
    q, k = torch.randn(2, 4, 64, 32), torch.randn(2, 4, 64, 32)
    positions = torch.arange(64)[None].expand(2, -1)
    expected_q, expected_k = apply_rotary_pos_emb(q, k, *hf(q, positions))
    rotation = RotaryEmbedding(32, theta, scaling)(positions)
    torch.testing.assert_close(rotation.apply(q), expected_q, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rotation.apply(k), expected_k, atol=1e-5, rtol=1e-5)


def test_llama3_scaling_keeps_high_frequencies_and_divides_low_ones() -> None:
    inv_freq = 1.0 / torch.tensor([1.0, 2.0, 5.0, 100.0])  # wavelengths 2 pi x these
    scaled = RopeScaling("llama3", 8.0, 1.0, 4.0, original_max_len=64).apply(inv_freq)
    torch.testing.assert_close(scaled[[0, 1]], inv_freq[[0, 1]])  # below 64 / 4
    torch.testing.assert_close(scaled[3], inv_freq[3] / 8)  # above 64 / 1
    assert inv_freq[2] / 8 < scaled[2] < inv_freq[2]  # in between: blended
    with pytest.raises(ValueError, match="rope_scaling='yarn' must be one of linear, llama3"):
        RopeScaling("yarn", 2.0)


def test_scores_depend_on_relative_position_only() -> None:
    torch.manual_seed(0)
    rotary = RotaryEmbedding(16)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(query_position: int, key_position: int) -> torch.Tensor:
        rotate = lambda x, p: rotary(torch.tensor([p])).apply(x)  # noqa: E731
        return (rotate(q, query_position) * rotate(k, key_position)).sum()

    torch.testing.assert_close(score(7, 3), score(104, 100), atol=1e-5, rtol=1e-5)
    by_offset = torch.stack([score(7, key) for key in range(8)])
    assert by_offset.std() > 0.1, "the score does not depend on the offset at all"


def test_position_zero_is_the_identity_and_norms_are_kept() -> None:
    x = torch.randn(2, 4, 5, 8)
    rotary = RotaryEmbedding(8)
    torch.testing.assert_close(rotary(torch.zeros(5, dtype=torch.long)).apply(x), x)
    rotated = rotary(torch.arange(5)).apply(x)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))


def test_odd_head_width_is_refused() -> None:
    with pytest.raises(ValueError, match="even head width, got d_head=7"):
        RotaryEmbedding(7)
