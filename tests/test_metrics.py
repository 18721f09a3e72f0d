"""Metrics against hand-computed values and against the libraries they stand in for."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sacrebleu
import torch
from scipy import stats

from scratchformer.metrics import (
    accuracy,
    bleu,
    chrf,
    correlations,
    entity_scores,
    macro_f1,
    perplexity,
    squad_scores,
    tokenized_bleu,
    translation_scores,
)

REFERENCES = ["A man rides a horse.", "Two dogs play in the snow."]


def test_an_identical_corpus_scores_100() -> None:
    assert translation_scores(REFERENCES, REFERENCES) == pytest.approx(
        {"bleu": 100.0, "bleu_tokenized_lc": 100.0, "chrf": 100.0}
    )


def test_bleu_by_hand_and_as_sacrebleu_computes_it() -> None:
    # Clipped n-gram precisions 5/6, 3/5, 2/4, 1/3; equal lengths, so no brevity penalty.
    hypothesis, reference = ["the cat sat on the mat"], ["the cat sat on a mat"]
    by_hand = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** (1 / 4)
    assert bleu(hypothesis, reference) == pytest.approx(by_hand)
    assert bleu(hypothesis, reference) == pytest.approx(
        sacrebleu.corpus_bleu(hypothesis, [reference]).score
    )


def test_scores_match_sacrebleu_on_a_small_corpus() -> None:
    hypotheses = ["a man is riding a horse .", "Two dogs are playing in snow."]
    assert bleu(hypotheses, REFERENCES) == pytest.approx(
        sacrebleu.corpus_bleu(hypotheses, [REFERENCES]).score
    )
    assert tokenized_bleu(hypotheses, REFERENCES) == pytest.approx(
        sacrebleu.corpus_bleu(hypotheses, [REFERENCES], lowercase=True, tokenize="13a").score
    )
    assert chrf(hypotheses, REFERENCES) == pytest.approx(
        sacrebleu.corpus_chrf(hypotheses, [REFERENCES]).score
    )
    assert 0 < bleu(hypotheses, REFERENCES) < tokenized_bleu(hypotheses, REFERENCES) < 100


def test_only_tokenized_bleu_ignores_case() -> None:
    shouted = [r.upper() for r in REFERENCES]
    assert tokenized_bleu(shouted, REFERENCES) == pytest.approx(100.0)
    assert bleu(shouted, REFERENCES) < 10
    assert chrf(shouted, REFERENCES) < 50
    assert tokenized_bleu(shouted, REFERENCES, lowercase=False) == bleu(shouted, REFERENCES)


def test_tokenized_bleu_splits_punctuation_so_tokenized_text_scores_the_same() -> None:
    tokenized = ["a man rides a horse .", "two dogs play in the snow ."]
    assert tokenized_bleu(tokenized, REFERENCES) == pytest.approx(100.0)


@pytest.mark.parametrize("metric", [bleu, tokenized_bleu, chrf, accuracy, macro_f1])
def test_unpaired_or_empty_inputs_are_errors(metric) -> None:
    with pytest.raises(ValueError, match="differ in length: 2 and 1"):
        metric(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="nothing to score"):
        metric([], [])


GOLD = ["a", "a", "b", "b", "c"]
PREDICTED = ["a", "b", "b", "b", "a"]


def test_accuracy_by_hand() -> None:
    assert accuracy(PREDICTED, GOLD) == pytest.approx(3 / 5)
    assert accuracy([1, 2], [1, 2]) == 1.0


def test_macro_f1_by_hand() -> None:
    # F1 = 2 tp / (predicted + gold) per label: a 2/4, b 4/5, c 0/1.
    assert macro_f1(PREDICTED, GOLD) == pytest.approx((0.5 + 0.8 + 0.0) / 3)
    # A label only ever predicted counts too (its F1 is 0): a 2/3, b 0/1, d 0/1.
    assert macro_f1(["a", "a", "d"], ["a", "b", "b"]) == pytest.approx((2 / 3 + 0 + 0) / 3)
    assert macro_f1(GOLD, GOLD) == 1.0


def test_macro_f1_and_accuracy_agree_with_sklearn() -> None:
    sk_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    gold, predicted = rng.integers(0, 5, 200).tolist(), rng.integers(0, 6, 200).tolist()
    assert macro_f1(predicted, gold) == pytest.approx(
        sk_metrics.f1_score(gold, predicted, average="macro", zero_division=0)
    )
    assert accuracy(predicted, gold) == pytest.approx(sk_metrics.accuracy_score(gold, predicted))


def test_correlations_agree_with_scipy() -> None:
    rng = np.random.default_rng(0)
    targets = rng.normal(size=50)
    predictions = (targets + rng.normal(size=50)).tolist()
    result = correlations(predictions, targets.tolist())
    assert result["pearson"] == pytest.approx(stats.pearsonr(predictions, targets).statistic)
    assert result["spearman"] == pytest.approx(stats.spearmanr(predictions, targets).statistic)
    assert 0 < result["spearman"] < 1


def test_correlations_are_zero_when_undefined() -> None:
    assert correlations([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) == {"pearson": 0.0, "spearman": 0.0}
    assert correlations([1.0], [2.0]) == {"pearson": 0.0, "spearman": 0.0}


def test_entity_scores_on_a_conll_example() -> None:
    # Gold entities: PER (0-1), LOC (3), ORG (0-1 of the second sentence). Predicted: the
    # same PER, and an ORG whose span is one token short, which does not count.
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "O"]]
    predicted = [["B-PER", "I-PER", "O", "O"], ["B-ORG", "O", "O"]]
    assert entity_scores(gold, predicted) == pytest.approx(
        {"entity_precision": 1 / 2, "entity_recall": 1 / 3, "entity_f1": 0.4}
    )
    assert entity_scores(gold, gold)["entity_f1"] == 1.0


def test_perplexity_of_uniform_predictions_is_the_vocabulary_size() -> None:
    vocab = 37
    logits, targets = torch.zeros(64, vocab), torch.randint(0, vocab, (64,))
    loss = torch.nn.functional.cross_entropy(logits, targets).item()
    assert loss == pytest.approx(math.log(vocab))
    assert perplexity(loss) == pytest.approx(vocab)
    assert math.isfinite(perplexity(1e6))


def test_squad_exact_match_normalises_case_punctuation_articles_and_spaces() -> None:
    predictions = ["The  Denver Broncos!", "an apple", "Broncos"]
    references = [["Denver Broncos"], ["Apple."], ["Denver Broncos"]]
    assert squad_scores(predictions, references)["exact_match"] == pytest.approx(200 / 3)


def test_squad_f1_by_hand() -> None:
    # "denver broncos won" vs "denver broncos": 2 common, precision 2/3, recall 1 -> 0.8
    # "carolina panthers" vs "panthers", "the carolina panthers": best is the second, 1.0
    # "super bowl" vs "fifty": nothing in common -> 0
    predictions = ["Denver Broncos won", "Carolina Panthers", "super bowl"]
    references = [["denver broncos"], ["Panthers", "the Carolina Panthers"], ["fifty"]]
    scores = squad_scores(predictions, references)
    assert scores["f1"] == pytest.approx(100 * (0.8 + 1.0 + 0.0) / 3, abs=1e-4)
    assert scores["exact_match"] == pytest.approx(100 / 3, abs=1e-4)


def test_squad_f1_counts_repeated_tokens_once_each() -> None:
    # prediction "a b b c" -> tokens b b c (the article "a" goes); reference "b c c":
    # common b, c = 2; precision 2/3, recall 2/3 -> F1 2/3
    assert squad_scores(["a b b c"], [["b c c"]])["f1"] == pytest.approx(200 / 3, abs=1e-4)


def test_squad_empty_prediction_scores_zero() -> None:
    assert squad_scores([""], [["Denver"]]) == {"exact_match": 0.0, "f1": 0.0}


def test_squad_scores_need_pairs() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        squad_scores(["x"], [])
