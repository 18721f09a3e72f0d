"""Sentences cut out of paragraphs."""

from __future__ import annotations

from scratchformer.data.text import sentences


def test_sentences_end_at_a_stop_before_a_capital_digit_or_quote() -> None:
    text = 'They came in 1066. 700 ships sailed! Did they? "Yes," said Ada. e.g. this. (Aside.)'
    assert [text[a:b] for a, b in sentences(text)] == [
        "They came in 1066.",
        "700 ships sailed!",
        "Did they?",
        '"Yes," said Ada. e.g. this.',
        "(Aside.)",
    ]
    assert sentences("no stop here") == [(0, 12)]
    assert sentences("") == [(0, 0)]
