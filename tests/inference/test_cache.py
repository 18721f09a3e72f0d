"""Decoding with the cache gives, at every step, the logits of a full recomputation."""

from __future__ import annotations

import pytest
import torch

from helpers import LATENT, LLAMA_STYLE, TINY_VOCAB, tiny_config
from scratchformer import build_model
from scratchformer.inference import DecoderCache

TOL = 1e-5


def step_by_step(model: torch.nn.Module, ids: torch.Tensor, cache: DecoderCache) -> torch.Tensor:
    """The logits of ``ids`` fed into ``cache``: four positions in one go (a prompt), then
    one by one."""
    prompt = model(ids[:, :4], cache=cache).logits
    steps = [model(ids[:, t : t + 1], cache=cache).logits for t in range(4, ids.shape[1])]
    return torch.cat([prompt, *steps], dim=1)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rotary", "alibi"])
def test_lm_step_by_step_equals_full_recomputation(norm_first, positional) -> None:
    model = build_model(
        tiny_config(arch="decoder", norm_first=norm_first, positional=positional)
    ).eval()
    ids = torch.randint(0, TINY_VOCAB, (3, 9))
    cache = DecoderCache(model.decoder, batch=3, max_len=9)
    torch.testing.assert_close(step_by_step(model, ids, cache), model(ids).logits, atol=TOL, rtol=0)
    assert cache.length == 9


GROUPED = {
    "grouped-query": dict(LLAMA_STYLE, n_kv_heads=2),
    "multi-query": dict(LLAMA_STYLE, n_kv_heads=1),
    "sliding-window": dict(LLAMA_STYLE, n_kv_heads=2, sliding_window=3),
    "qwen2": dict(LLAMA_STYLE, n_kv_heads=2, qkv_bias=True, tie_output=False),
}


@pytest.mark.parametrize("name", GROUPED)
def test_llama_family_step_by_step_equals_full_recomputation(name: str) -> None:
    model = build_model(tiny_config(**GROUPED[name])).eval()
    ids = torch.randint(0, TINY_VOCAB, (3, 9))
    cache = DecoderCache(model.decoder, batch=3, max_len=9)
    torch.testing.assert_close(step_by_step(model, ids, cache), model(ids).logits, atol=TOL, rtol=0)
    kv_heads, d_head = model.config.kv_heads, 32 // 4
    assert all(c.keys.shape == (3, kv_heads, 9, d_head) for c in cache.self_attn)
    assert model.decoder.layers[0].self_attn.cache_numbers == 2 * kv_heads * d_head


@pytest.mark.parametrize("q_lora_rank", [None, 8])
def test_latent_attention_step_by_step_equals_full_recomputation(q_lora_rank) -> None:
    """Multi-head latent attention's cache holds, per layer and position, the latent and
    the shared rotated key, not the heads' keys and values: 12 + 4 numbers, where
    multi-head attention's would hold 2 * 4 heads * 8."""
    model = build_model(tiny_config(**LLAMA_STYLE, **LATENT, q_lora_rank=q_lora_rank)).eval()
    ids = torch.randint(0, TINY_VOCAB, (3, 9))
    cache = DecoderCache(model.decoder, batch=3, max_len=9)
    torch.testing.assert_close(step_by_step(model, ids, cache), model(ids).logits, atol=TOL, rtol=0)
    assert all(c.keys.shape == (3, 1, 9, 12) for c in cache.self_attn)
    assert all(c.values.shape == (3, 1, 9, 4) for c in cache.self_attn)
    assert model.decoder.layers[0].self_attn.cache_numbers == 12 + 4


def test_a_sliding_window_forgets_what_lies_before_it() -> None:
    """With one layer, a window of 3 makes the last logits blind to all but the last three
    tokens; the cached steps agree."""
    model = build_model(tiny_config(**GROUPED["sliding-window"], n_layers=1)).eval()
    ids = torch.randint(0, TINY_VOCAB, (1, 8))
    changed = ids.clone()
    changed[0, :5] = (changed[0, :5] + 1) % TINY_VOCAB
    torch.testing.assert_close(model(changed).logits[:, -1], model(ids).logits[:, -1])
    wide = build_model(tiny_config(**LLAMA_STYLE, n_kv_heads=2, n_layers=1))
    wide.load_state_dict(model.state_dict())
    assert not torch.allclose(wide(changed).logits[:, -1], wide(ids).logits[:, -1])


@pytest.mark.parametrize("positional", ["learned", "rotary", "alibi", "grouped-query"])
def test_left_padded_prompts_match_each_prompt_alone(positional: str) -> None:
    config = GROUPED.get(positional, dict(arch="decoder", positional=positional))
    model = build_model(tiny_config(**config)).eval()
    short, long = torch.randint(1, TINY_VOCAB, (1, 3)), torch.randint(1, TINY_VOCAB, (1, 6))
    ids = torch.cat([torch.cat([torch.zeros(1, 3, dtype=torch.long), short], 1), long])
    mask = ids != 0
    mask[1] = True
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    cache = DecoderCache(model.decoder, batch=2, max_len=8)
    logits = model(ids, mask, cache=cache, positions=positions).logits
    torch.testing.assert_close(logits[0, -1], model(short).logits[0, -1], atol=TOL, rtol=0)
    torch.testing.assert_close(logits[1, -1], model(long).logits[0, -1], atol=TOL, rtol=0)
    nxt = torch.randint(1, TINY_VOCAB, (2, 1))
    mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.bool)], 1)
    step = model(nxt, mask, cache=cache, positions=positions[:, -1:] + 1).logits
    expected = model(torch.cat([short, nxt[:1]], 1)).logits[0, -1]
    torch.testing.assert_close(step[0, -1], expected, atol=TOL, rtol=0)


@pytest.mark.parametrize("positional", ["sinusoidal", "rotary", "alibi"])
def test_seq2seq_cached_decoding_equals_full_decoding(positional: str) -> None:
    config = tiny_config(arch="seq2seq", tgt_vocab_size=31, positional=positional)
    model = build_model(config).eval()
    src, tgt = torch.randint(1, TINY_VOCAB, (2, 7)), torch.randint(1, 31, (2, 6))
    src_mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    memory, _ = model.encode(src, src_mask)
    full, *_ = model.decode(tgt, memory, src_mask)
    cache = DecoderCache(model.decoder, batch=2, max_len=6)
    steps = [model.decode(tgt[:, t : t + 1], memory, src_mask, cache=cache)[0] for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=TOL, rtol=0)
    assert all(c.kv is not None for c in cache.cross_attn)


def test_reorder_keeps_the_chosen_rows() -> None:
    model = build_model(tiny_config(arch="decoder")).eval()
    ids = torch.randint(0, TINY_VOCAB, (3, 5))
    cache = DecoderCache(model.decoder, batch=3, max_len=7)
    model(ids, cache=cache)
    cache.reorder(torch.tensor([2, 2, 0]))
    nxt = torch.randint(0, TINY_VOCAB, (3, 1))
    step = model(nxt, cache=cache).logits[:, -1]
    expected = model(torch.cat([ids[[2, 2, 0]], nxt], 1)).logits[:, -1]
    torch.testing.assert_close(step, expected, atol=TOL, rtol=0)
    # a second reorder gathers back into the first buffers (they change places each time)
    cache.reorder(torch.tensor([1, 0, 0]))
    last = torch.randint(0, TINY_VOCAB, (3, 1))
    step = model(last, cache=cache).logits[:, -1]
    prefixes = torch.cat([ids[[2, 2, 0]], nxt], 1)[[1, 0, 0]]
    expected = model(torch.cat([prefixes, last], 1)).logits[:, -1]
    torch.testing.assert_close(step, expected, atol=TOL, rtol=0)


def test_under_bf16_autocast_the_cache_keeps_bf16_and_gives_the_same_logits() -> None:
    """Attention reads the keys and values in bfloat16 under autocast anyway: keeping them
    so halves the cache and changes no logit."""
    model = build_model(tiny_config(arch="decoder")).eval()
    ids = torch.randint(0, TINY_VOCAB, (2, 6))
    logits = {}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for dtype in (torch.float32, torch.bfloat16):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
                cache = DecoderCache(model.decoder, batch=2, max_len=6)
            assert cache.self_attn[0].keys.dtype == dtype
            steps = [model(ids[:, t : t + 1], cache=cache).logits for t in range(6)]
            logits[dtype] = torch.cat(steps, dim=1)
    torch.testing.assert_close(logits[torch.bfloat16], logits[torch.float32], atol=0, rtol=0)


def test_overflowing_the_cache_is_a_clear_error() -> None:
    model = build_model(tiny_config(arch="decoder")).eval()
    cache = DecoderCache(model.decoder, batch=1, max_len=4)
    with pytest.raises(ValueError, match="the cache holds 4 positions; 5 needed"):
        model(torch.randint(0, TINY_VOCAB, (1, 5)), cache=cache)
