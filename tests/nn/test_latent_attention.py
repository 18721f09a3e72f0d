"""Multi-head latent attention: Hugging Face's DeepseekV3Attention with the same weights,
what its cache keeps, packed tokens."""

import pytest
import torch
from transformers import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3RotaryEmbedding,
)

from scratchformer.config import ModelConfig
from scratchformer.nn import (
    MultiHeadAttention,
    MultiHeadLatentAttention,
    RotaryEmbedding,
    causal_mask,
    combine_masks,
    padding_mask,
)
from scratchformer.nn.attention import ATTENTIONS
from scratchformer.nn.packing import Packing
from torch_reference import lengths_mask

TOL = 1e-5
SIZES = dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10)
"""Every width its own, so that a part read in another's place cannot fit."""
NAMES = {
    "q_proj": "q_proj",
    "q_a_proj": "q_a_proj",
    "q_a_norm": "q_a_layernorm",
    "q_b_proj": "q_b_proj",
    "kv_a_proj": "kv_a_proj_with_mqa",
    "kv_a_norm": "kv_a_layernorm",
    "kv_b_proj": "kv_b_proj",
    "out_proj": "o_proj",
}
"""Our modules -> DeepseekV3Attention's."""


def their_name(ours: str) -> str:
    """DeepseekV3Attention's name of our parameter ``ours``."""
    module, _, parameter = ours.partition(".")
    return f"{NAMES[module]}.{parameter}"


@pytest.mark.parametrize("q_lora_rank", [None, 6])
@pytest.mark.parametrize("bias", [False, True])
def test_latent_attention_matches_hugging_face_deepseek_v3(q_lora_rank, bias) -> None:
    """Queries projected at once or through their low-rank bottleneck, with and without
    DeepSeek's ``attention_bias``; rotary positions (pairs ``i, i + d / 2``:
    ``rope_interleave=False``), a padding and causal mask; written out and fused."""
    torch.manual_seed(0)
    config = DeepseekV3Config(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=q_lora_rank,
        rope_interleave=False,
        attention_bias=bias,
        **SIZES,
    )
    config._attn_implementation = "eager"
    theirs = DeepseekV3Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.normal_(std=0.3)
    ours = MultiHeadLatentAttention(32, 4, **SIZES, q_lora_rank=q_lora_rank, bias=bias).eval()
    state = theirs.state_dict()
    ours.load_state_dict({name: state[their_name(name)] for name in ours.state_dict()})
    x, positions = torch.randn(3, 7, 32), torch.arange(7)[None].expand(3, -1)
    may_attend = combine_masks(padding_mask(lengths_mask([7, 5, 2], 7)), causal_mask(7))
    additive = torch.zeros(may_attend.shape).masked_fill(~may_attend, torch.finfo().min)
    expected, expected_weights = theirs(
        x, DeepseekV3RotaryEmbedding(config)(x, positions), additive
    )
    rotation = RotaryEmbedding(8)(positions)
    out, weights = ours(x, mask=may_attend, need_weights=True, rotation=rotation)
    torch.testing.assert_close(out, expected, atol=TOL, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=TOL, rtol=0)
    fast, _ = ours(x, mask=may_attend, rotation=rotation)
    torch.testing.assert_close(fast, expected, atol=TOL, rtol=0)


class PassThrough:
    """A self-attention cache that records what it is given and holds nothing before it."""

    def __init__(self) -> None:
        self.appended: list[tuple[torch.Tensor, torch.Tensor]] = []

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.appended.append((k, v))
        return k, v


def test_the_cache_keeps_the_normalised_latent_and_the_shared_rotated_key() -> None:
    """What a cache is given: a position's normalised latent and its one rotated key
    ``(batch, 1, len, width)``, the cache's shapes, and nothing of the heads' keys and
    values; the heads are expanded from what it returns."""
    attention = MultiHeadLatentAttention(32, 4, **SIZES).eval()
    x, rotation = torch.randn(2, 5, 32), RotaryEmbedding(8)(torch.arange(5))
    cache = PassThrough()
    out, _ = attention(x, is_causal=True, cache=cache, rotation=rotation)
    ((latent, key),) = cache.appended
    compressed, shared = attention.kv_a_proj(x).split([16, 8], dim=-1)
    torch.testing.assert_close(latent, attention.kv_a_norm(compressed)[:, None])
    torch.testing.assert_close(key, rotation.apply(shared[:, None]))
    assert attention.cache_shapes == ((1, 16), (1, 8)) == (latent.shape[1::2], key.shape[1::2])
    torch.testing.assert_close(out, attention(x, is_causal=True, rotation=rotation)[0])


def test_a_position_costs_the_latent_and_one_key_in_the_cache() -> None:
    """The example of docs/design.md by hand: d_model 512, 8 heads of 64; a latent of 128
    and a rotated key of 32 numbers, against 8 keys and 8 values of 64."""
    with torch.device("meta"):
        latent = MultiHeadLatentAttention(512, 8, 128, 32, qk_nope_head_dim=64, v_head_dim=64)
        multi_head = MultiHeadAttention(512, 8)
    assert latent.cache_numbers == 128 + 32 == 160
    assert multi_head.cache_numbers == 2 * 8 * 64 == 1024


def test_packed_tokens_give_the_padded_batch_s_outputs() -> None:
    """An encoder's packed real tokens are projected, then unpacked to attend."""
    attention = MultiHeadLatentAttention(32, 4, **SIZES, q_lora_rank=6).eval()
    real = lengths_mask([5, 2, 4], 5)
    x, packing = torch.randn(3, 5, 32), Packing.of(real)
    padded, _ = attention(x, mask=padding_mask(real))
    packed, _ = attention(packing.pack(x), mask=padding_mask(real), packing=packing)
    torch.testing.assert_close(packed, packing.pack(padded), atol=1e-6, rtol=0)


def test_the_attention_of_a_config_is_self_attention_only() -> None:
    config = ModelConfig(arch="decoder", d_model=32, n_heads=4, attention="latent", **SIZES)
    attention = ATTENTIONS["latent"](config)
    assert isinstance(attention, MultiHeadLatentAttention) and attention.q_lora_rank is None
    assert attention.kv_a_norm.eps == config.layer_norm_eps and attention.out_proj.bias is not None
    with pytest.raises(ValueError, match="attention='latent' has no cross-attention"):
        ATTENTIONS["latent"](config, cross=True)
    with pytest.raises(ValueError, match="attention='latent' is self-attention: it takes no"):
        attention(torch.randn(1, 2, 32), torch.randn(1, 2, 32))
