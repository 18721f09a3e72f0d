"""Task metrics, shared by training-time evaluation and ``scratchformer eval``."""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats
from seqeval.metrics import f1_score, precision_score, recall_score


def perplexity(mean_loss: float) -> float:
    """``exp`` of the mean per-token cross-entropy (capped to stay finite)."""
    return math.exp(min(mean_loss, 50.0))


def correlations(predictions: Sequence[float], targets: Sequence[float]) -> dict[str, float]:
    """Pearson and Spearman correlation of predicted and gold values (0 when undefined)."""
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
    gold, predicted = [list(s) for s in gold], [list(s) for s in predicted]
    return {
        "entity_precision": float(precision_score(gold, predicted, zero_division=0)),
        "entity_recall": float(recall_score(gold, predicted, zero_division=0)),
        "entity_f1": float(f1_score(gold, predicted, zero_division=0)),
    }
