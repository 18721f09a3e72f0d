"""Plain text cut into sentences, for the tasks that read sentences out of paragraphs
(cloze questions, contrastive sentence pretraining)."""

from __future__ import annotations

import re

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
"""A break between sentences: white space after ``.``, ``!`` or ``?``, before a capital,
digit, quote or parenthesis."""

Span = tuple[int, int]


def sentences(text: str) -> list[Span]:
    """The sentences of ``text`` as character spans (:data:`SENTENCE_END`)."""
    spans, start = [], 0
    for match in SENTENCE_END.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    return [*spans, (start, len(text))]
