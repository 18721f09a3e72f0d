import pytest
import torch

from scratchformer import EncoderModel, ModelConfig
from scratchformer.models import pool


def config(**overrides) -> ModelConfig:
    values = dict(arch="encoder", vocab_size=30, d_model=16, n_heads=2, n_layers=2, d_ff=32)
    return ModelConfig(**{**values, **overrides})


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
    assert out.last_hidden_state.shape == (2, 5, 16)
    assert (out.logits is None) if shape is None else (out.logits.shape == shape)
    assert len(out.attentions["encoder"]) == 2
    assert out.attentions["encoder"][0].shape == (2, 2, 5, 5)


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
