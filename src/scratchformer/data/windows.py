"""Windows over a long context for extractive question answering.

A question and its context become ``[CLS] question [SEP] context piece [SEP]`` inputs. A
context longer than one input allows is read through overlapping windows (BERT's "doc
stride"); every window knows which characters of the context each of its tokens stands for,
so that a predicted span of tokens maps back to an exact substring of the context. An answer
given in characters becomes a start and an end token in each window that holds it whole;
the windows that do not point at ``[CLS]`` (position 0).

Optionally a context token whose word is also a word of the question gets a segment id of
its own (DrQA's exact-match feature, Chen et al. 2017): the question's words marked where
they recur in the context, near which its answer mostly is.
"""

from __future__ import annotations

from dataclasses import dataclass

from .text import SHARED_SEGMENT, shared_words
from .tokenizer import Tokenizer

Span = tuple[int, int]
"""Characters ``[start, end)`` of a text."""
QUESTION, CONTEXT = 0, 1
"""Segment ids: the question (with ``[CLS]`` and its ``[SEP]``) and the context; with
``mark_shared_words`` the context's words of the question are
:data:`~scratchformer.data.text.SHARED_SEGMENT`."""


@dataclass(frozen=True)
class Window:
    """One input of a question: ids, segment ids (:data:`QUESTION` up to the first
    ``[SEP]``, then :data:`CONTEXT` or ``SHARED_SEGMENT``), the characters of the context
    each position stands for (``None`` for the question and the specials), and the target
    positions of the answer: ``(0, 0)`` when it is not in it."""

    ids: list[int]
    segments: list[int]
    offsets: list[Span | None]
    start: int = 0
    end: int = 0


def answer_tokens(offsets: list[Span], answer: Span) -> Span | None:
    """The first and last token of the context whose characters overlap ``answer``, or
    ``None`` when none does (an answer of whitespace, or beyond the text)."""
    first, last = answer
    covering = [i for i, (start, end) in enumerate(offsets) if start < last and end > first]
    return (covering[0], covering[-1]) if covering else None


def question_windows(
    tokenizer: Tokenizer,
    question: str,
    context: str,
    *,
    max_len: int,
    stride: int,
    max_question_len: int,
    answer: Span | None = None,
    mark_shared_words: bool = False,
) -> list[Window]:
    """The windows of ``question`` over ``context``, each at most ``max_len`` tokens; the
    question is cut to ``max_question_len`` tokens. Consecutive windows start ``stride``
    context tokens apart (fewer if a window holds fewer), the last ends at the context's
    end. ``answer`` (characters of the context) sets the windows' targets;
    ``mark_shared_words`` gives the context's words of the question their own segment id
    (:func:`~scratchformer.data.text.shared_words`)."""
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    if cls is None or sep is None:
        raise ValueError("question answering needs a tokenizer with [CLS] and [SEP] tokens")
    question_ids = tokenizer.encode(question)[:max_question_len]
    ids, offsets = tokenizer.encode_offsets(context)
    room = max_len - len(question_ids) - 3
    if room < 1:
        raise ValueError(
            f"data.max_len={max_len} leaves no room for the context after a question of "
            f"{len(question_ids)} tokens (data.qa.max_question_len={max_question_len})"
        )
    target = None if answer is None else answer_tokens(offsets, answer)
    shared = shared_words(context, question, offsets) if mark_shared_words else [False] * len(ids)
    segments = [SHARED_SEGMENT if s else CONTEXT for s in shared]
    head = [cls, *question_ids, sep]
    windows = []
    first = 0
    while True:
        last = min(first + room, len(ids))
        start = end = 0
        if target is not None and first <= target[0] and target[1] < last:
            start, end = (len(head) + i - first for i in target)
        windows.append(
            Window(
                ids=[*head, *ids[first:last], sep],
                segments=[QUESTION] * len(head) + segments[first:last] + [CONTEXT],
                offsets=[None] * len(head) + list(offsets[first:last]) + [None],
                start=start,
                end=end,
            )
        )
        if last == len(ids):
            return windows
        first += min(stride, room)
