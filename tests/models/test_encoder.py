import pytest
import torch

from helpers import tiny_config
from scratchformer import EncoderModel, ModelConfig
from scratchformer.models import pool


def config(**overrides) -> ModelConfig:
    return tiny_config(**{"arch": "encoder", "vocab_size": 30, **overrides})


@pytest.mark.parametrize(
    ("head", "num_labels", "shape"),
    [
        (None, 2, None),
        ("classification", 3, (2, 3)),
        ("regression", 1, (2, 1)),
        ("token_classification", 9, (2, 5, 9)),
    ],
)
def test_heads_give_their_shapes(head, num_labels, shape) -> None:
    model = EncoderModel(config(head=head, num_labels=num_labels)).eval()
    out = model(torch.randint(0, 30, (2, 5)), need_weights=True)
    assert out.last_hidden_state.shape == (2, 5, model.config.d_model)
    assert (out.logits is None) if shape is None else (out.logits.shape == shape)
    assert len(out.attentions["encoder"]) == model.config.n_layers
    assert out.attentions["encoder"][0].shape == (2, model.config.n_heads, 5, 5)


def test_mean_pooling_ignores_padding() -> None:
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = torch.tensor([[1, 1, 0]])
    torch.testing.assert_close(pool(hidden, mask, "mean"), torch.tensor([[2.0, 3.0]]))
    torch.testing.assert_close(pool(hidden, mask, "first"), torch.tensor([[1.0, 2.0]]))
    assert torch.equal(pool(hidden, torch.zeros(1, 3), "mean"), torch.zeros(1, 2))


def test_classifier_logits_ignore_padding_content() -> None:
    model = EncoderModel(config(head="classification")).eval()
    ids = torch.randint(1, 30, (1, 6))
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    other = ids.clone()
    other[0, 4:] = torch.randint(1, 30, (2,))
    torch.testing.assert_close(model(ids, mask).logits, model(other, mask).logits)


def test_pooler_is_dense_and_tanh_on_the_first_token() -> None:
    model = EncoderModel(config(pooler=True)).eval()
    out = model(torch.randint(0, 30, (2, 5)))
    dense = model.pooler.dense
    torch.testing.assert_close(out.pooler_output, torch.tanh(dense(out.last_hidden_state[:, 0])))
    assert EncoderModel(config()).eval()(torch.randint(0, 30, (2, 5))).pooler_output is None


def test_rotary_encoder_matches_hugging_face_roformer() -> None:
    """RoFormer is BERT with rotary self-attention, on interleaved pairs of dimensions
    (2i, 2i + 1); ours pairs i with i + d_head / 2, so its query and key rows are reordered
    within each head (the same reordering of both leaves every score unchanged)."""
    from transformers import RoFormerConfig, RoFormerModel

    from scratchformer.interop.hf import from_hf
    from scratchformer.interop.hf_weights import bert_table

    rotary = config(
        dropout=0.0,
        activation="gelu",
        positional="rotary",
        type_vocab_size=2,
        scale_embedding=False,
        embedding_norm=True,
        layer_norm_eps=1e-12,
    )
    heads, d_head = rotary.n_heads, rotary.d_model // rotary.n_heads
    torch.manual_seed(0)
    roformer = RoFormerModel(
        RoFormerConfig(
            vocab_size=rotary.vocab_size,
            embedding_size=rotary.d_model,
            hidden_size=rotary.d_model,
            num_attention_heads=heads,
            num_hidden_layers=rotary.n_layers,
            intermediate_size=rotary.d_ff,
            hidden_act="gelu",
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
    ).eval()
    model = EncoderModel(rotary).eval()
    table = bert_table(rotary)
    del table["embedding.positions.weight"]
    weights = from_hf(roformer.state_dict(), table)
    half_layout = torch.cat([torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)])
    rows = (torch.arange(heads)[:, None] * d_head + half_layout).flatten()
    for i in range(rotary.n_layers):
        for kind in ("weight", "bias"):
            name = f"encoder.layers.{i}.self_attn.qkv_proj.{kind}"
            q, k, v = weights[name].chunk(3)
            weights[name] = torch.cat([q[rows], k[rows], v])
    model.load_state_dict(weights)
    ids = torch.randint(0, 30, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    with torch.no_grad():
        expected = roformer(ids, attention_mask=mask).last_hidden_state
        ours = model(ids, mask).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(ours[real], expected[real], atol=1e-5, rtol=1e-4)
