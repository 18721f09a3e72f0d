"""T5's choices in our models, built from scratch: unscaled attention with the scale folded
into the initialisation, the scaled input of the tied head, dropout after the final norm,
one relative bias table a stack."""

import torch
import torch.nn.functional as F

from helpers import PROMPTS, T5_STYLE, tiny_config
from scratchformer import build_model
from scratchformer.inference import generate

TOL = 1e-5


def test_unscaled_attention_starts_as_the_scaled_one() -> None:
    """The query weights are drawn sqrt(d_head) times smaller, so a model with T5's
    unscaled scores computes at first what the same draw with scaled scores does."""
    outputs = []
    for scale_attention in (True, False):
        torch.manual_seed(0)
        config = tiny_config(**T5_STYLE | {"scale_attention": scale_attention})
        model = build_model(config).eval()
        src, tgt = torch.randint(0, 29, (2, 9)), torch.randint(0, 29, (2, 6))
        outputs.append(model(src, tgt).logits)
    torch.testing.assert_close(outputs[0], outputs[1], atol=TOL, rtol=0)


def test_the_tied_head_scales_its_input() -> None:
    torch.manual_seed(0)
    model = build_model(tiny_config(**T5_STYLE)).eval()
    src, tgt = torch.randint(0, 29, (2, 9)), torch.randint(0, 29, (2, 6))
    out = model(src, tgt)
    embedding = model.tgt_embedding.tokens.weight
    assert model.lm_head.weight is embedding
    expected = F.linear(out.last_hidden_state * 32**-0.5, embedding)
    torch.testing.assert_close(out.logits, expected, atol=TOL, rtol=0)
    labels = torch.randint(0, 29, (2, 6))
    loss = model(src, tgt, labels=labels).loss
    torch.testing.assert_close(loss, F.cross_entropy(expected.flatten(0, 1), labels.flatten()))


def test_dropout_after_the_final_norm() -> None:
    """In training, about the rate's share of the stacks' outputs are exact zeros; without
    ``final_dropout`` only those whose every term of the residual sum was dropped (0.5 to
    the power of 1 + the sub-layers, about 3% in the encoder)."""
    src, tgt = torch.randint(0, 29, (4, 50)), torch.randint(0, 29, (4, 50))
    for final_dropout in (True, False):
        torch.manual_seed(0)
        config = tiny_config(**T5_STYLE | {"final_dropout": final_dropout, "dropout": 0.5})
        model = build_model(config).train()
        memory, _ = model.encode(src)
        _, hidden, _, _ = model.decode(tgt, memory)
        for states in (memory, hidden):
            zeros = (states == 0).float().mean().item()
            assert 0.45 < zeros < 0.55 if final_dropout else zeros < 0.05


def test_one_bias_table_a_stack_bidirectional_in_the_encoder_only() -> None:
    model = build_model(tiny_config(**T5_STYLE, relative_buckets=8, relative_max_distance=20))
    tables = {name: p.shape for name, p in model.named_parameters() if "positional" in name}
    assert tables == {"encoder.positional.weight": (8, 4), "decoder.positional.weight": (8, 4)}
    assert model.encoder.positional.bidirectional and not model.decoder.positional.bidirectional


def test_a_decoder_with_the_relative_bias_generates_alike_cached_batched_or_alone() -> None:
    """The bias of a cache's new queries is aligned to its last keys, and left padding
    shifts a row's queries and keys alike (distances are counted in key indices)."""
    torch.manual_seed(0)
    config = tiny_config(arch="decoder", positional="relative", norm_first=True)
    model = build_model(config).eval()
    cached = generate(model, PROMPTS, max_new_tokens=10, greedy=True)
    assert generate(model, PROMPTS, max_new_tokens=10, greedy=True, use_cache=False) == cached
    alone = [generate(model, [prompt], max_new_tokens=10, greedy=True)[0] for prompt in PROMPTS]
    assert alone == cached
