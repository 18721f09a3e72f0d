import pytest
import torch
from transformers import BloomConfig, BloomModel
from transformers.models.bloom.modeling_bloom import build_alibi_tensor

from helpers import TINY_VOCAB, tiny_config
from scratchformer import build_model
from scratchformer.config import ModelConfig
from scratchformer.inference import generate
from scratchformer.nn.alibi import ALiBi, alibi_slopes

TOL = 1e-6


def test_slopes_by_hand_and_the_rule_for_other_head_counts() -> None:
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([2**-2, 2**-4, 2**-6, 2**-8]))
    # 6 heads: the 4 slopes of 4 heads, then those of 8 heads at odd i (1, 3)
    expected = torch.tensor([2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])
    torch.testing.assert_close(alibi_slopes(6), expected, atol=TOL, rtol=0)


@pytest.mark.parametrize("n_heads", [1, 2, 3, 5, 6, 8, 12, 16, 24])
def test_slopes_are_those_of_bloom(n_heads: int) -> None:
    """BLOOM's bias of position 1 is the slope itself."""
    bloom = build_alibi_tensor(torch.ones(1, 2), n_heads, torch.float32)[:, 0, 1]
    torch.testing.assert_close(alibi_slopes(n_heads), bloom, atol=TOL, rtol=0)


def test_bias_by_hand_symmetric_and_aligned_to_the_last_keys() -> None:
    alibi = ALiBi(2)
    slopes = [0.0625, 0.00390625]  # 2^(-8 i / 2)
    distance = [[0, 1, 2], [1, 0, 1], [2, 1, 0]]
    expected = torch.tensor([[[-s * d for d in row] for row in distance] for s in slopes])
    torch.testing.assert_close(alibi(3, 3), expected[None], atol=TOL, rtol=0)
    # two new queries (positions 1 and 2) against the three keys of a cache
    torch.testing.assert_close(alibi(2, 3), expected[None, :, 1:], atol=TOL, rtol=0)
    assert "slopes" not in alibi.state_dict()


def _bloom_and_ours(n_heads: int = 6) -> tuple[BloomModel, torch.nn.Module]:
    d_model = 8 * n_heads
    bloom = BloomModel(
        BloomConfig(
            vocab_size=TINY_VOCAB,
            hidden_size=d_model,
            n_layer=2,
            n_head=n_heads,
            hidden_dropout=0.0,
            attention_dropout=0.0,
        )
    ).eval()
    ours = build_model(
        ModelConfig(
            arch="decoder",
            vocab_size=TINY_VOCAB,
            d_model=d_model,
            n_heads=n_heads,
            n_layers=2,
            d_ff=4 * d_model,
            dropout=0.0,
            activation="gelu_tanh",
            norm_first=True,
            positional="alibi",
            scale_embedding=False,
            embedding_norm=True,
        )
    ).eval()
    ours.load_state_dict(_our_weights(bloom.state_dict(), n_heads, d_model))
    return bloom, ours


def _our_weights(theirs: dict[str, torch.Tensor], n_heads: int, d: int) -> dict:
    """BLOOM's weights under our names; its fused QKV holds (q, k, v) per head, ours all
    queries, then all keys, then all values."""
    ours = {
        "embedding.tokens.weight": theirs["word_embeddings.weight"],
        "embedding.norm.weight": theirs["word_embeddings_layernorm.weight"],
        "embedding.norm.bias": theirs["word_embeddings_layernorm.bias"],
        "decoder.norm.weight": theirs["ln_f.weight"],
        "decoder.norm.bias": theirs["ln_f.bias"],
        "lm_head.weight": theirs["word_embeddings.weight"],
    }
    names = {
        "self_attn.out_proj": "self_attention.dense",
        "self_attn_norm": "input_layernorm",
        "feed_forward.w1": "mlp.dense_h_to_4h",
        "feed_forward.w2": "mlp.dense_4h_to_h",
        "feed_forward_norm": "post_attention_layernorm",
    }
    for i in range(2):
        for our, their in names.items():
            for kind in ("weight", "bias"):
                ours[f"decoder.layers.{i}.{our}.{kind}"] = theirs[f"h.{i}.{their}.{kind}"]
        for kind in ("weight", "bias"):
            qkv = theirs[f"h.{i}.self_attention.query_key_value.{kind}"]
            qkv = qkv.unflatten(0, (n_heads, 3, d // n_heads)).transpose(0, 1)
            ours[f"decoder.layers.{i}.self_attn.qkv_proj.{kind}"] = qkv.flatten(0, 2)
    return ours


def test_a_decoder_with_alibi_matches_hugging_face_bloom() -> None:
    """Six heads: the slopes of a head count that is no power of two. Left padding, as in
    generation: BLOOM counts positions from each row's first real token."""
    torch.manual_seed(0)
    bloom, ours = _bloom_and_ours()
    ids = torch.randint(0, TINY_VOCAB, (3, 7))
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[1, :3] = 0
    mask[2, :6] = 0
    expected = bloom(ids, attention_mask=mask).last_hidden_state
    for need_weights in (False, True):
        out = ours(ids, attention_mask=mask.bool(), need_weights=need_weights)
        real = mask.bool()
        torch.testing.assert_close(out.last_hidden_state[real], expected[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ["encoder", "decoder"])
def test_the_bias_penalises_distance_from_the_query(arch: str) -> None:
    """With every query and key projection zero, scores are the bias alone: an encoder's
    weights fall off on both sides of the query, a decoder's towards the past."""
    model = build_model(tiny_config(arch=arch, positional="alibi", n_layers=1)).eval()
    layer = (model.encoder if arch == "encoder" else model.decoder).layers[0]
    with torch.no_grad():
        layer.self_attn.qkv_proj.weight[: 2 * 32].zero_()
        layer.self_attn.qkv_proj.bias[: 2 * 32].zero_()
    out = model(torch.randint(0, TINY_VOCAB, (1, 5)), need_weights=True)
    weights = next(iter(out.attentions.values()))[0][0, 0]  # first head
    slope = alibi_slopes(4)[0]
    query = 2
    expected = torch.exp(-slope * (torch.arange(5) - query).abs())
    if arch == "decoder":
        expected[query + 1 :] = 0
    torch.testing.assert_close(weights[query], expected / expected.sum(), atol=TOL, rtol=0)


def test_a_decoder_with_alibi_trains_and_generates() -> None:
    torch.manual_seed(0)
    model = build_model(tiny_config(arch="decoder", positional="alibi", norm_first=True))
    ids = torch.randint(0, TINY_VOCAB, (4, 12))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        loss = model(ids[:, :-1], labels=ids[:, 1:]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 2
    prompts = [ids[0, :3].tolist(), ids[1, :5].tolist()]
    together = generate(model.eval(), prompts, max_new_tokens=6, greedy=True)
    alone = [generate(model, [p], max_new_tokens=6, greedy=True)[0] for p in prompts]
    assert together == alone
