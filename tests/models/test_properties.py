"""Properties every model must have, whatever its weights: padding invariance, causality,
independent batch rows, gradients to every parameter, no NaN from fully padded rows."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import LATENT, LLAMA_STYLE, T5_STYLE, tiny_config
from scratchformer import build_model

VOCAB = 23
CONFIGS = {
    "encoder": dict(arch="encoder", head="token_classification", num_labels=5),
    "encoder-pre-LN": dict(arch="encoder", head="classification", norm_first=True),
    "decoder": dict(arch="decoder"),
    "decoder-learned": dict(arch="decoder", positional="learned", norm_first=True),
    "decoder-rotary": dict(arch="decoder", positional="rotary", norm_first=True),
    "encoder-rotary": dict(arch="encoder", head="token_classification", positional="rotary"),
    "decoder-llama": dict(LLAMA_STYLE, n_kv_heads=2, tie_output=False),
    "decoder-sliding-window": dict(
        arch="decoder", norm_first=True, positional="rotary", n_kv_heads=1, sliding_window=3
    ),
    "seq2seq": dict(arch="seq2seq", tgt_vocab_size=19),
    "seq2seq-pre-LN": dict(arch="seq2seq", tgt_vocab_size=19, norm_first=True),
    "seq2seq-rotary": dict(arch="seq2seq", tgt_vocab_size=19, positional="rotary"),
    "decoder-alibi": dict(arch="decoder", positional="alibi", norm_first=True),
    "encoder-alibi": dict(arch="encoder", head="token_classification", positional="alibi"),
    "seq2seq-alibi": dict(arch="seq2seq", tgt_vocab_size=19, positional="alibi"),
    "seq2seq-t5": dict(T5_STYLE, gated=True, activation="gelu_tanh"),
    "decoder-relative": dict(arch="decoder", positional="relative", norm_first=True),
    "decoder-latent": dict(LLAMA_STYLE, **LATENT, q_lora_rank=8),
    "encoder-latent": dict(
        arch="encoder", head="token_classification", positional="rotary", **LATENT
    ),
}
ALL = pytest.mark.parametrize("name", CONFIGS)
PROPERTY = settings(max_examples=15, deadline=None)


@functools.cache
def _built(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(tiny_config(vocab_size=VOCAB, **CONFIGS[name]))


def make(name: str) -> torch.nn.Module:
    """The model named, in eval mode with gradients cleared (built once per session)."""
    model = _built(name).eval()
    model.zero_grad(set_to_none=True)
    return model


def run(model, ids, mask=None, tgt=None, tgt_mask=None) -> torch.Tensor:
    """The model's main output (logits) for one input, whatever its architecture."""
    if model.config.arch == "seq2seq":
        tgt = ids[:, :4] % 19 if tgt is None else tgt
        return model(ids, tgt, mask, tgt_mask).logits
    return model(ids, mask).logits


def with_padding(ids: torch.Tensor, lengths: list[int], extra: int) -> tuple[torch.Tensor, ...]:
    """The batch, its mask, and the same batch with ``extra`` more padded positions."""
    length = ids.shape[1]
    mask = torch.arange(length)[None] < torch.tensor(lengths)[:, None]
    longer = torch.cat([ids, torch.randint(0, VOCAB, (ids.shape[0], extra))], dim=1)
    return mask, longer, torch.cat([mask, torch.zeros(ids.shape[0], extra, dtype=torch.bool)], 1)


@ALL
@PROPERTY
@given(lengths=st.lists(st.integers(1, 7), min_size=1, max_size=3), extra=st.integers(1, 5))
def test_more_padding_changes_nothing_at_real_positions(name, lengths, extra) -> None:
    model = make(name)
    ids = torch.randint(0, VOCAB, (len(lengths), 7))
    mask, longer, longer_mask = with_padding(ids, lengths, extra)
    short, long = run(model, ids, mask), run(model, longer, longer_mask)
    per_sentence = model.config.head == "classification" or model.config.arch == "seq2seq"
    if per_sentence:  # one output a sentence (or a target that did not change)
        torch.testing.assert_close(long, short, atol=1e-5, rtol=0)
    else:
        torch.testing.assert_close(long[:, :7][mask], short[mask], atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "name",
    [
        "decoder",
        "decoder-learned",
        "seq2seq",
        "seq2seq-pre-LN",
        "seq2seq-t5",
        "decoder-relative",
        "decoder-latent",
    ],
)
@PROPERTY
@given(t=st.integers(0, 5), padded=st.booleans())
def test_outputs_before_t_ignore_tokens_after_t(name, t, padded) -> None:
    model = make(name)
    ids = torch.randint(0, 19, (2, 6))
    changed = ids.clone()
    changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % 19
    mask = torch.ones(2, 6, dtype=torch.bool) if padded else None
    if model.config.arch == "seq2seq":  # the decoder is causal in the target
        src = torch.randint(0, VOCAB, (2, 5))
        before = run(model, src, tgt=ids, tgt_mask=mask)
        after = run(model, src, tgt=changed, tgt_mask=mask)
    else:
        before, after = run(model, ids, mask), run(model, changed, mask)
    torch.testing.assert_close(after[:, : t + 1], before[:, : t + 1], atol=1e-5, rtol=0)
    if t < 5:
        assert not torch.allclose(after[:, t + 1 :], before[:, t + 1 :])


@ALL
def test_rows_of_a_batch_are_independent(name) -> None:
    model = make(name)
    ids = torch.randint(0, VOCAB, (3, 6))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4], dtype=torch.bool)
    batch = run(model, ids, mask)
    other = ids.clone()
    other[[0, 2]] = torch.randint(0, VOCAB, (2, 6))
    torch.testing.assert_close(run(model, other, mask)[1], batch[1], atol=1e-5, rtol=0)
    torch.testing.assert_close(run(model, ids[1:2], mask[1:2])[0], batch[1], atol=1e-5, rtol=0)


@ALL
def test_gradients_reach_every_parameter(name) -> None:
    model = make(name).train()
    ids = torch.randint(0, VOCAB, (3, 6))
    run(model, ids).float().pow(2).mean().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
    assert not missing


@ALL
def test_fully_padded_row_gives_no_nan(name) -> None:
    model = make(name).train()
    ids = torch.randint(0, VOCAB, (2, 5))
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    out = run(model, ids, mask, tgt_mask=mask[:, :4])
    assert torch.isfinite(out).all()
    out.sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(grad).all() for grad in grads)


@pytest.mark.parametrize("name", [n for n in CONFIGS if not n.startswith("encoder")])
def test_labels_give_the_cross_entropy_of_the_logits(name) -> None:
    """``labels`` make a language model return the loss of its logits (label smoothing and
    ignored positions included) with the same gradients, tied weights too."""
    model = make(name)
    ids = torch.randint(0, VOCAB, (3, 6))
    tgt = ids[:, :4] % 19
    labels = (ids if model.config.arch == "decoder" else tgt).clone()
    labels[0, 1] = -100
    inputs = (ids, tgt) if model.config.arch == "seq2seq" else (ids,)
    logits = model(*inputs).logits
    expected = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), label_smoothing=0.1
    )
    expected.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    out = model(*inputs, labels=labels, label_smoothing=0.1)
    assert out.logits is None
    torch.testing.assert_close(out.loss, expected, atol=1e-6, rtol=1e-6)
    out.loss.backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], atol=1e-6, rtol=1e-5, msg=n)
