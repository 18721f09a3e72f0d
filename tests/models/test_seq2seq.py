import pytest
import torch
from torch import nn

from helpers import tiny_config
from scratchformer import ModelConfig, Seq2SeqModel
from scratchformer.nn import causal_mask
from torch_reference import (
    copy_decoder_layer,
    copy_encoder_layer,
    copy_norm,
    lengths_mask,
    torch_mask,
)


def small_config(**overrides) -> ModelConfig:
    values = dict(
        arch="seq2seq", vocab_size=37, tgt_vocab_size=41, n_decoder_layers=3, final_norm=True
    )
    return tiny_config(**{**values, **overrides})


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("norm_first", [False, True])
def test_full_stack_matches_torch_transformer(norm_first: bool) -> None:
    config = small_config(norm_first=norm_first)
    ours = Seq2SeqModel(config).eval()
    theirs = nn.Transformer(
        config.d_model,
        config.n_heads,
        config.n_layers,
        config.decoder_layers,
        config.d_ff,
        dropout=0.1,
        batch_first=True,
        norm_first=norm_first,
    ).eval()
    for our_layer, their_layer in zip(ours.encoder.layers, theirs.encoder.layers, strict=True):
        copy_encoder_layer(our_layer, their_layer)
    for our_layer, their_layer in zip(ours.decoder.layers, theirs.decoder.layers, strict=True):
        copy_decoder_layer(our_layer, their_layer)
    copy_norm(ours.encoder.norm, theirs.encoder.norm)
    copy_norm(ours.decoder.norm, theirs.decoder.norm)

    src, tgt = torch.randint(0, 37, (3, 9)), torch.randint(0, 41, (3, 6))
    src_real, tgt_real = lengths_mask([9, 4, 7], 9), lengths_mask([6, 6, 2], 6)
    hidden = theirs(
        ours.src_embedding(src),
        ours.tgt_embedding(tgt),
        tgt_mask=torch_mask(causal_mask(6)),
        src_key_padding_mask=torch_mask(src_real),
        tgt_key_padding_mask=torch_mask(tgt_real),
        memory_key_padding_mask=torch_mask(src_real),
    )
    expected = ours.lm_head(hidden)
    for need_weights in (False, True):
        out = ours(src, tgt, src_real, tgt_real, need_weights=need_weights)
        torch.testing.assert_close(out.logits[tgt_real], expected[tgt_real], atol=1e-5, rtol=0)
    assert out.logits.shape == (3, 6, 41)
    assert [len(out.attentions[k]) for k in ("encoder", "decoder", "cross")] == [2, 3, 3]
    assert out.attentions["cross"][0].shape == (3, config.n_heads, 6, 9)


def test_shared_embeddings_and_tied_output() -> None:
    model = Seq2SeqModel(small_config(tgt_vocab_size=None, share_embeddings=True))
    assert model.src_embedding is model.tgt_embedding
    assert model.lm_head.weight is model.tgt_embedding.tokens.weight
    untied = Seq2SeqModel(small_config(tie_output=False))
    assert untied.lm_head.weight is not untied.tgt_embedding.tokens.weight
    assert untied.src_embedding is not untied.tgt_embedding


def test_encode_then_decode_equals_forward() -> None:
    model = Seq2SeqModel(small_config()).eval()
    src, tgt = torch.randint(0, 37, (2, 5)), torch.randint(0, 41, (2, 4))
    memory, _ = model.encode(src)
    logits, *_ = model.decode(tgt, memory)
    torch.testing.assert_close(logits, model(src, tgt).logits)
