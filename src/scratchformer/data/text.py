"""Plain text cut into sentences, for the tasks that read sentences out of paragraphs
(cloze questions, contrastive sentence pretraining); and the words two texts share, which
question answering and sentence pairs can mark (``data.pairs.mark_shared_words``)."""

from __future__ import annotations

import re

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
"""A break between sentences: white space after ``.``, ``!`` or ``?``, before a capital,
digit, quote or parenthesis."""

WORD = re.compile(r"\w+")
"""A word: a run of letters, digits and underscores."""
SHARED_SEGMENT = 2
"""The segment id of a token whose word the other text of its input has too."""


def pair_segments(mark_shared_words: bool) -> int:
    """The segment ids an input of two texts uses: the first and the second's, and with
    ``mark_shared_words`` :data:`SHARED_SEGMENT`."""
    return SHARED_SEGMENT + 1 if mark_shared_words else 2


Span = tuple[int, int]


def sentences(text: str) -> list[Span]:
    """The sentences of ``text`` as character spans (:data:`SENTENCE_END`)."""
    spans, start = [], 0
    for match in SENTENCE_END.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    return [*spans, (start, len(text))]


def shared_words(text: str, other: str, offsets: list[Span]) -> list[bool]:
    """For each token of ``text`` (its characters ``offsets``), whether the word it is part
    of (:data:`WORD`, case ignored) is a word of ``other`` too."""
    words = {word.lower() for word in WORD.findall(other)}
    word_at = [""] * len(text)
    for match in WORD.finditer(text):
        word_at[match.start() : match.end()] = [match.group().lower()] * len(match.group())
    return [start < len(text) and word_at[start] in words for start, _ in offsets]
