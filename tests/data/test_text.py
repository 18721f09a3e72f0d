"""Sentences cut out of paragraphs, and the words two texts share."""

from __future__ import annotations

from scratchformer.data.text import sentences, shared_words


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


def test_shared_words_are_the_words_of_the_other_text_in_any_case() -> None:
    text = "Grace Hopper's compiler, grace notes; Hop."
    offsets = [(0, 5), (6, 9), (9, 12), (12, 13), (13, 14), (15, 23), (23, 24), (25, 30)]
    offsets += [(31, 36), (36, 37), (38, 41), (41, 42)]
    # both pieces of "Hopper" (its word is asked), "s" (a word of the question), both
    # "Grace"s in any case; not "compiler", "notes", "Hop" (a word of its own) nor punctuation
    expected = [1, 1, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0]
    assert shared_words(text, "Who wrote GRACE's hopper?", offsets) == [bool(e) for e in expected]
