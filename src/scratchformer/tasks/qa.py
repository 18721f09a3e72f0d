"""Extractive question answering (SQuAD): the answer is a span of the context. A question
and its context -> windows ``[CLS] question [SEP] context piece [SEP]`` -> encoder -> span
head: a start and an end logit per token, trained with the mean of the two cross-entropies.
The answer is the best span over all windows of a question, mapped back to the characters
of the context; scored by SQuAD's exact match and token F1."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..config import Recipe
from ..data.batching import pad_batch
from ..data.cloze import cloze_questions
from ..data.readers import Question, read_squad
from ..data.registry import QuestionDataset, dataset_choice, named_dataset
from ..data.text import pair_segments
from ..data.windows import Span, Window, question_windows
from ..errors import DataSettingsError
from ..metrics import squad_scores
from ..predictions import ANSWER, Record
from .base import Batch, ExampleTask, TokenLabels, add, register_task

SPECIALS = ("pad", "unk", "cls", "sep")


@dataclass(frozen=True)
class Encoded:
    """A window and the index of its question in the split."""

    window: Window
    question: int


@dataclass(frozen=True)
class Labelled(Encoded):
    """A window of a question with reference answers: the question, and how many windows
    it has (its answer is scored once all have been seen)."""

    source: Question
    windows: int


@dataclass(frozen=True)
class ScoredSpan:
    """An answer: characters of the context, and the probability the model gives it."""

    span: Span
    score: float


@dataclass(frozen=True)
class Answer(Record):
    """The answer to a question: a span of its context (``start`` to ``end``, in
    characters), and the probability the model gives it."""

    answer: str
    start: int
    end: int
    probability: float

    def line(self) -> str:
        return f"{self.answer}\t{self.probability:.4f}"


@register_task
class QuestionAnsweringTask(ExampleTask):
    """Question and context -> encoder -> span head; exact match and F1 of the answers."""

    name = "qa"
    arch = "encoder"
    head = "span"
    metric = "f1"
    higher_is_better = True
    predicts = ANSWER

    def __init__(self, recipe: Recipe) -> None:
        super().__init__(recipe)
        if recipe.train.rdrop:
            raise ValueError(f"[train] rdrop={recipe.train.rdrop}: not supported by the qa task")
        self._questions: dict[tuple[str, str | None], list[Question]] = {}

    # -- data --------------------------------------------------------------------------

    def read(self, split: str, path: str | None = None) -> list[Question]:
        """The questions of a split (:meth:`labelled`); the training split is joined by the
        cloze questions of its contexts (``data.qa.cloze_questions``)."""
        questions = self.labelled(split, path)
        if split != "train" or not self.data.qa.cloze_questions:
            return questions
        contexts = dict.fromkeys(q.context for q in questions)
        return questions + cloze_questions(
            contexts, self.data.qa.cloze_questions, self.train_config.seed
        )

    def labelled(self, split: str, path: str | None = None) -> list[Question]:
        """The labelled questions of a split, from ``path`` or ``data.<split>`` (SQuAD JSON),
        else from ``data.dataset``; read once."""
        key = (split, path)
        if key not in self._questions:
            file = path or getattr(self.data, split, None)
            if file is not None:
                self._questions[key] = read_squad(file)
            elif (dataset := named_dataset(self.data.dataset, QuestionDataset)) is not None:
                self._questions[key] = dataset.examples(split, self.data.root)
            else:
                raise DataSettingsError(
                    f"no {split} data: set {dataset_choice(QuestionDataset)} or "
                    f"data.{split} = FILE (SQuAD JSON)"
                )
        return self._questions[key]

    def prepare(self) -> None:
        """The run's tokenizer, learnt from the labelled questions and their contexts (cloze
        questions would repeat the contexts, less a sentence)."""
        questions = self.labelled("train")
        contexts = list(dict.fromkeys(q.context for q in questions))
        texts = contexts + [q.question for q in questions]
        self.tokenizers = {"tokenizer": self.train_tokenizer(texts, SPECIALS)}

    def model_sizes(self) -> dict[str, Any]:
        return {
            "vocab_size": self.tokenizer().vocab_size,
            "num_labels": 2,
            "type_vocab_size": max(
                self.recipe.model.type_vocab_size, pair_segments(self.data.pairs.mark_shared_words)
            ),
        }

    def windows(self, question: str, context: str, answer: Span | None = None) -> list[Window]:
        """The windows of a question over its context (see
        :func:`~scratchformer.data.windows.question_windows`)."""
        data = self.data
        return question_windows(
            self.tokenizer(),
            question,
            context,
            max_len=data.max_len,
            stride=data.qa.doc_stride,
            max_question_len=data.qa.max_question_len,
            answer=answer,
            mark_shared_words=data.pairs.mark_shared_words,
        )

    def encode(self, raw: Sequence[Question]) -> list[Labelled]:
        """Every window of every question; the targets are those of the first answer."""
        encoded = []
        for i, q in enumerate(raw):
            windows = self.windows(q.question, q.context, (q.answers[0].start, q.answers[0].end))
            encoded += [Labelled(window, i, q, len(windows)) for window in windows]
        return encoded

    def length(self, example: Encoded) -> int:
        return len(example.window.ids)

    def collate(self, examples: Sequence[Encoded]) -> Batch:
        """Padded ids, segments and mask; targets ``(windows, 2)``: start and end."""
        windows = [e.window for e in examples]
        ids, mask = pad_batch([w.ids for w in windows], self.tokenizer().pad_id)
        segments, _ = pad_batch([w.segments for w in windows], 0)
        targets = torch.tensor([[w.start, w.end] for w in windows], dtype=torch.long)
        inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": segments}
        return Batch(inputs, targets, int(mask.sum()))

    # -- loss and metrics --------------------------------------------------------------

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        """The mean of the start and end cross-entropies over the real tokens."""
        logits = self.logits(model, batch).float()
        return span_loss(
            logits,
            batch.inputs["attention_mask"],
            batch.targets,
            self.train_config.label_smoothing,
        )

    def accumulate(self, totals: dict[str, Any], logits: Tensor, batch: Batch) -> None:
        """Sums of the windows' loss and of those whose start and end are both right, and
        each window with its logits, for :meth:`summarize` to answer its question."""
        mask = batch.inputs["attention_mask"]
        loss = span_loss(logits, mask, batch.targets, reduction="sum")
        correct = (masked(logits, mask).argmax(1) == batch.targets).all(-1)
        add(totals, loss_sum=loss.item(), windows=len(batch.targets), correct=correct.sum().item())
        totals.setdefault("seen", []).extend(zip(batch.examples, logits.cpu(), strict=True))

    def summarize(self, totals: dict[str, Any]) -> dict[str, float]:
        """Loss, start / end accuracy, and the exact match and F1 of the decoded answers of
        the questions whose windows were all evaluated (all but some with ``max_batches``)."""
        seen: list[tuple[Labelled, Tensor]] = totals["seen"]
        by_question = group_by_question(seen)
        asked = {example.question: example for example, _ in seen}
        answered = [i for i, found in by_question.items() if len(found) == asked[i].windows]
        spans = {i: best_answer(by_question[i], self.data.qa.max_answer_len).span for i in answered}
        predicted = [asked[i].source.context[slice(*span)] for i, span in spans.items()]
        references = [[a.text for a in asked[i].source.answers] for i in answered]
        count = totals["windows"]
        return {
            "loss": totals["loss_sum"] / count,
            "span_accuracy": totals["correct"] / count,
            **squad_scores(predicted, references),
        }

    # -- inference ---------------------------------------------------------------------

    def answer(
        self, model: nn.Module, questions: Sequence[tuple[str, str]], progress: bool = False
    ) -> list[ScoredSpan]:
        """The best answer to each ``(question, context)``, with its probability."""
        encoded = [
            Encoded(window, i)
            for i, (question, context) in enumerate(questions)
            for window in self.windows(question, context)
        ]
        forward = self.forward_in_order(model, encoded, progress=progress)
        rows = [row for logits, _ in forward for row in logits]
        by_question = group_by_question(zip(encoded, rows, strict=True))
        return [
            best_answer(by_question.get(i, []), self.data.qa.max_answer_len)
            for i in range(len(questions))
        ]

    def records(
        self, model: nn.Module, inputs: list[tuple[str, str]], *, progress: bool
    ) -> list[Answer]:
        """The best answer to each ``(question, context)``."""
        found = self.answer(model, inputs, progress)
        return [
            Answer(context[slice(*best.span)], *best.span, best.score)
            for (_, context), best in zip(inputs, found, strict=True)
        ]

    def example(self, text: str) -> tuple[str, str]:
        """A question on ``text``."""
        return "what is it?", text

    def attention_inputs(self, text: str) -> tuple[dict[str, Tensor], TokenLabels]:
        """``question<TAB>context``, its first window as in training."""
        question, context = ANSWER.reads.split(text)
        inputs = self.collate([Encoded(self.windows(question, context)[0], 0)]).inputs
        tokens = self.tokenizer().labels(inputs["input_ids"][0].tolist())
        return inputs, {"encoder": (tokens, tokens)}


def group_by_question(
    windows: Iterable[tuple[Encoded, Tensor]],
) -> dict[int, list[tuple[Window, Tensor]]]:
    """Windows with their logits, by the index of their question."""
    grouped: dict[int, list[tuple[Window, Tensor]]] = {}
    for example, logits in windows:
        grouped.setdefault(example.question, []).append((example.window, logits))
    return grouped


def masked(logits: Tensor, mask: Tensor) -> Tensor:
    """``(batch, seq, 2)`` logits with padding positions at -inf."""
    return logits.masked_fill(~mask.bool()[..., None], float("-inf"))


def span_loss(
    logits: Tensor,
    mask: Tensor,
    targets: Tensor,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> Tensor:
    """The mean of the start and end cross-entropies of ``(batch, seq, 2)`` logits against
    ``(batch, 2)`` target positions, over the real tokens (``mask``) only: padding gets no
    probability, nor any of the smoothing's. ``reduction``: ``mean`` or ``sum`` over windows."""
    real = mask.bool()[..., None]
    log_p = masked(logits, mask).log_softmax(1)
    loss = -log_p.gather(1, targets[:, None, :]).squeeze(1)  # (batch, 2)
    if label_smoothing:
        uniform = -log_p.masked_fill(~real, 0.0).sum(1) / real.sum(1)
        loss = (1 - label_smoothing) * loss + label_smoothing * uniform
    per_window = loss.mean(-1)
    return per_window.sum() if reduction == "sum" else per_window.mean()


def best_answer(windows: Sequence[tuple[Window, Tensor]], max_answer_len: int) -> ScoredSpan:
    """The likeliest span of context tokens over the windows of a question, with logits
    ``(positions, 2)`` each, at most ``max_answer_len`` tokens long: its characters and
    probability, ``p(start) * p(end)`` in its window, where ``[CLS]`` too may take the mass
    (a window without the answer puts it there). No context at all: an empty answer."""
    best = ScoredSpan((0, 0), 0.0)
    for window, logits in windows:
        context = torch.tensor([offset is not None for offset in window.offsets])
        allowed = context.clone()
        allowed[0] = True  # [CLS]
        log_p = logits[: len(allowed)].masked_fill(~allowed[:, None], float("-inf"))
        log_p = log_p.log_softmax(0)
        pair = log_p[:, 0, None] + log_p[None, :, 1]  # (start, end)
        length = torch.arange(len(allowed))
        valid = (length[None, :] >= length[:, None]) & (
            length[None, :] - length[:, None] < max_answer_len
        )
        valid &= context[:, None] & context[None, :]
        pair = pair.masked_fill(~valid, float("-inf"))
        score, flat = pair.flatten().max(0)
        if score.item() == float("-inf"):
            continue
        probability = score.exp().item()
        if probability > best.score:
            start, end = divmod(flat.item(), len(allowed))
            first, last = window.offsets[start], window.offsets[end]
            assert first is not None and last is not None
            best = ScoredSpan((first[0], last[1]), probability)
    return best
