"""Task metrics, shared by training-time evaluation and ``scratchformer eval``.

Translation metrics take one reference per hypothesis, as plain (detokenized) strings, and
return scores on sacreBLEU's 0-100 scale. Label metrics take one label per item, of any
hashable type.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric


def perplexity(mean_loss: float) -> float:
    """``exp`` of the mean per-token cross-entropy (capped to stay finite)."""
    return math.exp(min(mean_loss, 50.0))


def correlations(predictions: Sequence[float], targets: Sequence[float]) -> dict[str, float]:
    """Pearson and Spearman correlation of predicted and gold values (0 when undefined)."""
    from scipy import stats  # (with seqeval's, slow to import: when needed)

    if len(predictions) < 2 or len(set(predictions)) < 2 or len(set(targets)) < 2:
        return {"pearson": 0.0, "spearman": 0.0}
    return {
        "pearson": float(stats.pearsonr(predictions, targets).statistic),
        "spearman": float(stats.spearmanr(predictions, targets).statistic),
    }


def entity_scores(
    gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
) -> dict[str, float]:
    """Entity-level precision, recall and F1 (CoNLL-style exact spans, with seqeval)."""
    from seqeval.metrics import f1_score, precision_score, recall_score  # (when needed)

    gold, predicted = [list(s) for s in gold], [list(s) for s in predicted]
    return {
        "entity_precision": float(precision_score(gold, predicted, zero_division=0)),
        "entity_recall": float(recall_score(gold, predicted, zero_division=0)),
        "entity_f1": float(f1_score(gold, predicted, zero_division=0)),
    }


def _check_pairs(first: Sequence[object], second: Sequence[object], what: str) -> None:
    """Raise ``ValueError`` unless the two sequences are non-empty and of equal length
    (sacreBLEU would silently score the shorter prefix)."""
    if len(first) != len(second):
        raise ValueError(f"{what} differ in length: {len(first)} and {len(second)}")
    if not first:
        raise ValueError(f"nothing to score: no {what}")


def _corpus_score(metric: Metric, hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """``metric``'s corpus score of ``hypotheses`` against one reference each."""
    _check_pairs(hypotheses, references, "hypotheses and references")
    return metric.corpus_score(list(hypotheses), [list(references)]).score


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Standard corpus BLEU of sacreBLEU on detokenized text: cased, 13a tokenization,
    exponential smoothing (signature ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp``).
    This is the number comparable with published WMT results."""
    return _corpus_score(BLEU(), hypotheses, references)


def tokenized_bleu(
    hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = True
) -> float:
    """Case-insensitive corpus BLEU over 13a tokens: sacreBLEU with ``tokenize="13a"`` and
    ``lowercase=True`` (signature ``case:lc|tok:13a``). This is close to what Multi30k
    tutorials and ``multi-bleu.perl -lc`` on tokenized text report: 13a splits off
    punctuation much as the Moses tokenizer does (it keeps ``don't`` whole, Moses splits
    it), so the texts may be tokenized or not. It forgives case errors, so it is never below
    :func:`bleu` and is not comparable with cased sacreBLEU scores: label it "BLEU
    (tokenized, lower-cased)". With ``lowercase=False`` it equals :func:`bleu`."""
    metric = BLEU(tokenize="13a", lowercase=lowercase, force=True)  # no "tokenized?" warning
    return _corpus_score(metric, hypotheses, references)


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus chrF of sacreBLEU (character 6-grams, beta 2, no word n-grams: chrF, not
    chrF++), cased."""
    return _corpus_score(CHRF(), hypotheses, references)


def translation_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """All translation metrics: cased sacreBLEU, tokenized lower-cased BLEU, chrF."""
    return {
        "bleu": bleu(hypotheses, references),
        "bleu_tokenized_lc": tokenized_bleu(hypotheses, references),
        "chrf": chrf(hypotheses, references),
    }


def squad_scores(
    predictions: Sequence[str], references: Sequence[Sequence[str]]
) -> dict[str, float]:
    """SQuAD v1.1's exact match and token F1 (0-100) of predicted answers, each against its
    reference answers: texts lower-cased, punctuation, the articles a / an / the and extra
    whitespace removed; each question scores its best reference. Computed by torchmetrics'
    SQuAD metric (the official script's normalisation); it differs from v1.1 only where a
    reference normalises to nothing, which an empty prediction then matches (v2.0's rule)."""
    from torchmetrics.functional.text.squad import squad  # slow to import: when needed

    _check_pairs(predictions, references, "predictions and references")
    ids = [str(i) for i in range(len(predictions))]
    scores = squad(
        [{"id": i, "prediction_text": p} for i, p in zip(ids, predictions, strict=True)],
        [{"id": i, "answers": {"text": list(r)}} for i, r in zip(ids, references, strict=True)],
    )
    return {"exact_match": float(scores["exact_match"]), "f1": float(scores["f1"])}


def accuracy(predicted: Sequence[Hashable], gold: Sequence[Hashable]) -> float:
    """Fraction of items whose predicted label equals the gold label."""
    _check_pairs(predicted, gold, "predicted and gold labels")
    return sum(p == g for p, g in zip(predicted, gold, strict=True)) / len(gold)


def macro_f1(predicted: Sequence[Hashable], gold: Sequence[Hashable]) -> float:
    """Unweighted mean over the labels seen in either sequence of each label's F1
    (``2 tp / (2 tp + fp + fn)``, 0 for a label never predicted correctly), as
    ``sklearn.metrics.f1_score(average="macro")``. Rare classes weigh as much as common
    ones."""
    _check_pairs(predicted, gold, "predicted and gold labels")
    hits = Counter(g for p, g in zip(predicted, gold, strict=True) if p == g)
    n_predicted, n_gold = Counter(predicted), Counter(gold)
    labels = n_predicted.keys() | n_gold.keys()
    return sum(2 * hits[c] / (n_predicted[c] + n_gold[c]) for c in labels) / len(labels)
