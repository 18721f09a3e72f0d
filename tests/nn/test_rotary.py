"""Rotary embeddings against Hugging Face's (Llama's) and against their defining property."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from scratchformer.nn import RotaryEmbedding


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
