"""Encoder-decoder decoding: greedy decoding, and beam search against exhaustive search."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

from helpers import COMPILED, compile_without_inductor, compiled_graphs, peaked
from scratchformer.inference import beam_search, greedy_decode

BOS, EOS = 1, 2


def tiny_seq2seq(
    tgt_vocab_size: int = 23, peaked_by: float = 3.0, **fields: Any
) -> torch.nn.Module:
    """A tiny random encoder-decoder with peaked output distributions (:func:`peaked`)."""
    return peaked(peaked_by, arch="seq2seq", vocab_size=19, tgt_vocab_size=tgt_vocab_size, **fields)


def sources() -> tuple[torch.Tensor, torch.Tensor]:
    """Three right-padded source sentences of lengths 7, 4 and 5."""
    ids = torch.randint(3, 19, (3, 7))
    mask = torch.arange(7) < torch.tensor([[7], [4], [5]])
    return ids.masked_fill(~mask, 0), mask


def emitted_token(model, src, mask) -> int:
    """A token that greedy decoding emits early: used as eos, it ends hypotheses at varied
    lengths (a random model rarely emits any particular token such as 2)."""
    return greedy_decode(model, src, mask, bos_id=BOS, eos_id=-1, max_len=2)[0][1]


def sequence_log_probs(model, src, tgt_inputs, targets) -> torch.Tensor:
    """Summed log-probabilities of ``targets`` given ``tgt_inputs``, by full forward passes."""
    logits = model(src.expand(len(targets), -1), tgt_inputs).logits
    return logits.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1).sum(-1)


def test_greedy_decode_follows_the_argmax_of_full_forward_passes() -> None:
    model = tiny_seq2seq()
    src, mask = sources()
    eos = emitted_token(model, src, mask)
    out = greedy_decode(model, src, mask, bos_id=BOS, eos_id=eos, max_len=8)
    for i, tokens in enumerate(out):
        length = int(mask[i].sum())
        prefix = [BOS]
        while len(prefix) <= 8:
            logits = model(src[i : i + 1, :length], torch.tensor([prefix])).logits
            prefix.append(int(logits[0, -1].argmax()))
            if prefix[-1] == eos:
                break
        assert tokens == [t for t in prefix[1:] if t != eos]


@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_beam_size_1_equals_greedy(scale: float) -> None:
    model = tiny_seq2seq(peaked_by=scale)
    src, mask = sources()
    eos = emitted_token(model, src, mask)
    greedy = greedy_decode(model, src, mask, bos_id=BOS, eos_id=eos, max_len=12)
    beams = beam_search(model, src, mask, bos_id=BOS, eos_id=eos, beam_size=1, max_len=12)
    assert [hyps[0].tokens for hyps in beams] == greedy
    assert len({len(tokens) for tokens in greedy}) > 1  # ends at eos and at max_len


def test_default_max_len_is_source_length_plus_50() -> None:
    model = tiny_seq2seq()
    src, mask = sources()
    never = -1  # an eos that never comes: every sentence runs to its limit
    lengths = [int(n) + 50 for n in mask.sum(1)]
    assert [len(t) for t in greedy_decode(model, src, mask, bos_id=BOS, eos_id=never)] == lengths
    beams = beam_search(model, src, mask, bos_id=BOS, eos_id=never, beam_size=2)
    assert [len(hyps[0].tokens) for hyps in beams] == lengths


def test_beam_search_finds_the_exhaustive_optimum() -> None:
    """Target vocabulary of 5 (pad, bos, eos, two words) and at most 4 target tokens: with
    a beam of 5 * 4**3 every candidate of every step ranks within the beam, so nothing is
    pruned and the n-best must be those of scoring every possible output by full forward
    passes: any of the 4 non-eos tokens, 0 to 3 of them then eos, or 4 without eos."""
    model = tiny_seq2seq(tgt_vocab_size=5, peaked_by=1.0)
    src = torch.randint(3, 19, (1, 6))
    max_len, alpha, words = 4, 0.6, [0, 1, 3, 4]
    candidates = []  # (score, tokens)
    for length in range(max_len + 1):
        outputs = [list(t) for t in itertools.product(words, repeat=length)]
        end = [EOS] if length < max_len else []
        targets = torch.tensor([t + end for t in outputs])
        inputs = torch.cat([torch.full((len(outputs), 1), BOS), targets[:, :-1]], 1)
        log_probs = sequence_log_probs(model, src, inputs, targets)
        penalty = ((5 + targets.shape[1]) / 6) ** alpha
        candidates += [(lp / penalty, t) for lp, t in zip(log_probs.tolist(), outputs, strict=True)]
    best = sorted(candidates, key=lambda c: c[0], reverse=True)[:5]
    for early_stopping in (True, False):
        (hyps,) = beam_search(
            model,
            src,
            None,
            bos_id=BOS,
            eos_id=EOS,
            beam_size=5 * 4**3,
            max_len=max_len,
            length_penalty=alpha,
            early_stopping=early_stopping,
            n_best=5,
        )
        assert [h.tokens for h in hyps] == [tokens for _, tokens in best]
        assert [h.score for h in hyps] == pytest.approx([s for s, _ in best], abs=1e-5)


@torch.no_grad()
def test_hypothesis_scores_are_length_penalised_log_probs_and_sorted() -> None:
    """Lengths count the eos token; hypotheses cut at ``max_len`` have none."""
    model = tiny_seq2seq(peaked_by=1.0)
    src, mask = sources()
    max_len = 6
    nbest = beam_search(
        model, src, mask, bos_id=BOS, eos_id=EOS, beam_size=6, max_len=max_len, n_best=6
    )
    for i, hyps in enumerate(nbest):
        assert len(hyps) == 6
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            targets = h.tokens + [EOS] * (len(h.tokens) < max_len)
            inputs = torch.tensor([[BOS, *targets[:-1]]])
            sentence = src[i : i + 1, : int(mask[i].sum())]
            log_prob = sequence_log_probs(model, sentence, inputs, torch.tensor([targets]))
            assert h.log_prob == pytest.approx(float(log_prob), abs=1e-4)
            assert h.score == pytest.approx(h.log_prob / ((5 + len(targets)) / 6) ** 0.6)
    lengths = {len(h.tokens) for hyps in nbest for h in hyps}
    assert max_len in lengths and len(lengths) > 1  # both kinds were checked


@pytest.mark.parametrize("early_stopping", [True, False])
def test_batched_beam_search_equals_each_sentence_alone(early_stopping: bool) -> None:
    model = tiny_seq2seq(peaked_by=1.5)
    src, mask = sources()
    eos = emitted_token(model, src, mask)
    options = dict(bos_id=BOS, eos_id=eos, beam_size=4, n_best=3, early_stopping=early_stopping)
    batched = beam_search(model, src, mask, **options)
    for i, hyps in enumerate(batched):
        (alone,) = beam_search(model, src[i : i + 1, : int(mask[i].sum())], None, **options)
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-5)


def test_decoding_without_the_cache_gives_the_same_hypotheses() -> None:
    """The KV cache is an optimisation only: recomputing every prefix finds the same
    beams with the same scores, and the same greedy outputs."""
    model = tiny_seq2seq(peaked_by=1.5)
    src, mask = sources()
    eos = emitted_token(model, src, mask)
    options = dict(bos_id=BOS, eos_id=eos, beam_size=4, n_best=3, max_len=10)
    cached = beam_search(model, src, mask, **options)
    recomputed = beam_search(model, src, mask, use_cache=False, **options)
    for with_cache, without in zip(cached, recomputed, strict=True):
        assert [h.tokens for h in with_cache] == [h.tokens for h in without]
        assert [h.score for h in with_cache] == pytest.approx([h.score for h in without], abs=1e-5)
    greedy = dict(bos_id=BOS, eos_id=eos, max_len=10)
    assert greedy_decode(model, src, mask, **greedy) == greedy_decode(
        model, src, mask, use_cache=False, **greedy
    )


def test_searching_on_never_does_worse_than_early_stopping() -> None:
    """Without early stopping the same search goes on, so its best can only improve."""
    model = tiny_seq2seq(peaked_by=1.0)
    src, mask = sources()
    eos = emitted_token(model, src, mask)
    options = dict(bos_id=BOS, eos_id=eos, beam_size=3, max_len=12, length_penalty=2.0)
    early = [h[0].score for h in beam_search(model, src, mask, early_stopping=True, **options)]
    late = [h[0].score for h in beam_search(model, src, mask, early_stopping=False, **options)]
    assert all(b >= a - 1e-6 for a, b in zip(early, late, strict=True))
    assert any(b > a + 1e-3 for a, b in zip(early, late, strict=True))  # here it finds better ones


def test_bad_n_best_is_a_clear_error() -> None:
    model = tiny_seq2seq()
    src, mask = sources()
    with pytest.raises(ValueError, match="n_best=3 must be between 1 and beam_size=2"):
        beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, beam_size=2, n_best=3)


def assert_same_hypotheses(found: list, expected: list) -> None:
    """The same tokens in the same order, scores equal to 1e-5."""
    for hyps, wanted in zip(found, expected, strict=True):
        assert [h.tokens for h in hyps] == [h.tokens for h in wanted]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in wanted], abs=1e-5)


def test_compiled_decoding_compiles_a_few_graphs_and_finds_the_eager_outputs(monkeypatch) -> None:
    """Through a ``CompiledModel`` the decoder batch keeps its shape, so a search of any
    length compiles four graphs: the encoder, the decoder's first step (which fills the
    cross-attention cache), the later steps, and the step that fills the KV cache to its
    end (the search runs to ``max_len``). Sentences that finish at different steps change
    nothing, and a longer search of the same batch compiles nothing more. Greedy decoding of
    the same sentences reuses the encoder's graph and compiles its own three decoder steps
    (3 rows, where beam search has 12), which beam search with one beam then reuses. (One
    test, as compiling is slow.) The graphs are Dynamo's, compiled here with eager kernels:
    what Inductor's kernels compute in an encoder-decoder is held by the compiled T5 test
    (``tests/interop/test_hf_t5.py``) and by the translation benchmark, fully autotuned."""
    from scratchformer.inference import CompiledModel

    compile_without_inductor(monkeypatch)

    model = tiny_seq2seq(peaked_by=1.5, **COMPILED)
    src, mask = sources()
    eos = emitted_token(model, src, mask)
    compiled = CompiledModel(model)
    before = compiled_graphs()
    for max_len, early_stopping in ((8, True), (30, False)):
        options = dict(bos_id=BOS, eos_id=eos, beam_size=4, n_best=3, max_len=max_len)
        options.update(early_stopping=early_stopping)
        expected = beam_search(model, src, mask, **options)
        assert_same_hypotheses(beam_search(compiled, src, mask, **options), expected)
        assert compiled_graphs() - before <= 4
    assert len({len(h.tokens) for hyps in expected for h in hyps}) > 2  # varied lengths
    options = dict(bos_id=BOS, eos_id=eos, max_len=12)
    greedy = greedy_decode(model, src, mask, **options)
    assert greedy_decode(compiled, src, mask, **options) == greedy
    assert len({len(tokens) for tokens in greedy}) > 1  # ends at eos and at max_len
    beams = beam_search(compiled, src, mask, beam_size=1, **options)
    assert_same_hypotheses(beams, beam_search(model, src, mask, beam_size=1, **options))
    assert compiled_graphs() - before <= 7
