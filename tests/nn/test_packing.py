"""Packed tokens: packing and unpacking, when a batch is packed, and an encoder that skips
padding computing what it computes on the padded batch, gradients included."""

from __future__ import annotations

import torch

from helpers import tiny_config
from scratchformer import build_model
from scratchformer.nn.packing import Packing, packing_for
from torch_reference import lengths_mask


def test_pack_keeps_real_tokens_in_order_and_unpack_pads_with_zeros() -> None:
    mask = lengths_mask([3, 1, 2], 3)
    x = torch.arange(9.0).view(3, 3, 1).expand(3, 3, 2)
    packing = Packing.of(mask)
    packed = packing.pack(x)
    assert packed[:, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 6.0, 7.0]
    expected = torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0], [6.0, 7.0, 0.0]])
    torch.testing.assert_close(packing.unpack(packed)[..., 1], expected, atol=0, rtol=0)


def test_only_batches_with_padding_are_packed() -> None:
    assert packing_for(None) is None
    assert packing_for(torch.ones(2, 4, dtype=torch.bool)) is None
    assert packing_for(lengths_mask([4, 2], 4)) is not None


def test_encoder_on_packed_tokens_computes_the_padded_forward_and_backward() -> None:
    """The packed path (the default) against the padded one (taken when attention weights
    are asked for), in training mode without dropout: outputs at real tokens and every
    gradient agree; the packed output is zero at padding."""
    torch.manual_seed(0)
    config = tiny_config(
        arch="encoder",
        vocab_size=30,
        dropout=0.0,
        head="classification",
        num_labels=3,
        pooling="first",
    )
    model = build_model(config).train()
    ids = torch.randint(1, 30, (3, 7))
    mask = lengths_mask([7, 4, 1], 7)
    results = []
    for need_weights in (False, True):
        model.zero_grad()
        out = model(ids, mask, need_weights=need_weights)
        (out.logits.square().sum() + out.last_hidden_state[mask].square().sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results.append((out.last_hidden_state.detach(), grads))
    (packed, packed_grads), (padded, padded_grads) = results
    torch.testing.assert_close(packed[mask], padded[mask], atol=1e-5, rtol=0)
    assert not packed[~mask].any()
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, atol=1e-5, rtol=1e-5, msg=name)
