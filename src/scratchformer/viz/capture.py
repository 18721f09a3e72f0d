"""The attention of a trained model on one input, ready to draw: the task encodes the text
as in training, the model runs once with ``need_weights=True``."""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from ..inference.translate import translate
from ..tasks import (
    ClassificationTask,
    LanguageModelTask,
    SimilarityTask,
    TaggingTask,
    Task,
    TranslationTask,
)
from .maps import AttentionMaps


@torch.no_grad()
def capture_attention(
    task: Task, model: nn.Module, text: str, target: str | None = None
) -> AttentionMaps:
    """The attention weights of ``model`` on ``text``, every layer and head, with the input
    encoded as the task encodes it for training.

    A translation model reads ``text`` as the source and ``target`` as the output (its own
    greedy translation when ``target`` is None); its decoder queries are the decoder's
    inputs, BOS first. A classifier of sentence pairs takes ``"first<TAB>second"``; a
    similarity model (a bi-encoder) one sentence, as it encodes each alone; a tagger reads
    words split on whitespace.
    """
    if not text.strip():
        raise ValueError("the text is empty: give the model something to attend to")
    if target is not None and not isinstance(task, TranslationTask):
        raise ValueError(f"a target is for translation models, not for a {task.name} run")
    was_training = model.training
    model.eval()
    try:
        return _capture(task, model, text, target)
    finally:
        model.train(was_training)


def _capture(task: Task, model: nn.Module, text: str, target: str | None) -> AttentionMaps:
    device = next(model.parameters()).device
    if isinstance(task, LanguageModelTask):
        tokenizer = task.tokenizer()
        limit = min(task.data.block_size, task.recipe.model.max_len)
        ids = tokenizer.encode(text)
        if len(ids) > limit:
            warnings.warn(
                f"the text has {len(ids)} tokens: the model sees its first {limit}",
                stacklevel=3,
            )
            ids = ids[:limit]
        out = model(torch.tensor([ids], device=device), need_weights=True)
        return _maps(out.attentions, {"decoder": (tokenizer.labels(ids),) * 2})
    if isinstance(task, TranslationTask):
        if target is None:
            target = translate(task, model, [text], beam_size=1)[0]
        batch = task.collate(task.encode([(text, target)])).to(device)
        source = task.source_tokenizer().labels(batch.inputs["src_ids"][0].tolist())
        output = task.target_tokenizer().labels(batch.inputs["tgt_ids"][0].tolist())
        tokens = {"encoder": (source, source), "decoder": (output, output)}
        tokens["cross"] = (output, source)
    elif isinstance(task, SimilarityTask):  # a bi-encoder reads each sentence alone
        ids = torch.tensor([task.sentence_ids(text)], device=device)
        _, weights = model.encode(ids, need_weights=True)
        words = task.tokenizer().labels(ids[0].tolist())
        return _maps({"encoder": weights}, {"encoder": (words, words)})
    elif isinstance(task, ClassificationTask | TaggingTask):
        if isinstance(task, ClassificationTask):
            example = task.encode_texts(task.split_line(text))
        else:
            example = task.encode_words(text.split())
        batch = task.collate([example]).to(device)
        words = task.tokenizer().labels(batch.inputs["input_ids"][0].tolist())
        tokens = {"encoder": (words, words)}
    else:
        raise ValueError(f"attention pictures do not support {task.name} runs")
    out = model(**batch.inputs, need_weights=True)
    return _maps(out.attentions, tokens)


def _maps(
    attentions: dict[str, list[Tensor]], tokens: dict[str, tuple[list[str], list[str]]]
) -> AttentionMaps:
    """Stack each kind's per-layer ``(1, heads, q, k)`` weights into ``(layers, heads, q, k)``."""
    weights = {kind: torch.cat(attentions[kind]).float().cpu() for kind in tokens}
    return AttentionMaps(
        weights,
        queries={kind: queries for kind, (queries, _) in tokens.items()},
        keys={kind: keys for kind, (_, keys) in tokens.items()},
    )
