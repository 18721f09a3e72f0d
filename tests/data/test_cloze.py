"""Cloze questions: which spans qualify, the question and context they make, and that the
answers of every question made from SQuAD's training contexts are where they say."""

from __future__ import annotations

from scratchformer.data.cloze import (
    cloze_question,
    cloze_questions,
    question_word,
    recurring_spans,
)
from scratchformer.data.registry import DATASETS
from scratchformer.data.text import sentences

TEXT = (
    "The Normans came from Normandy to New York City. In 1066 the Normans crossed the sea "
    "with 700 ships. William sailed from New York City in 1066! Paris met Paris in Rome."
)


def spans_of(text: str, index: int) -> list[str]:
    return [text[start:end] for start, end in recurring_spans(text, sentences(text)[index])]


def test_recurring_names_and_numbers_qualify_at_their_longest() -> None:
    # "New York City" whole, not "York"; "The" is a common word; "Normandy" and "700" and
    # "William" occur once.
    assert spans_of(TEXT, 0) == ["Normans", "New York City"]
    # "In" begins the sentence; "the Normans" starts with a common word.
    assert spans_of(TEXT, 1) == ["1066", "Normans"]
    assert spans_of(TEXT, 2) == ["New York City", "1066"]
    # twice in its own sentence is not again elsewhere; "Rome" occurs once.
    assert spans_of(TEXT, 3) == []


def test_a_capitalised_common_word_is_no_name() -> None:
    text = "They said This one. This is this. Then This one came."
    assert spans_of(text, 0) == []
    text = "We met O'Neil there. Then o'neil left. Later we saw O'Neil."  # a word of two runs
    assert spans_of(text, 0) == []
    assert spans_of(text.replace("o'neil", "he"), 0) == ["O'Neil"]


def test_question_words_follow_the_answer() -> None:
    assert question_word("1066") == "when"
    assert question_word("1990s") == "when"
    assert question_word("700") == "how many"
    assert question_word("1,000") == "how many"
    assert question_word("Genghis Khan") == "what"


def test_a_cloze_question_asks_the_sentence_of_the_rest() -> None:
    sentence = sentences(TEXT)[1]
    start = TEXT.index("1066")
    question = cloze_question(TEXT, sentence, (start, start + 4), "k")
    assert question.question == "In when the Normans crossed the sea with 700 ships?"
    assert question.context == (
        "The Normans came from Normandy to New York City. William sailed from New York City "
        "in 1066! Paris met Paris in Rome."
    )
    (answer,) = question.answers
    assert question.context[answer.start : answer.end] == answer.text == "1066"


def test_questions_are_seeded_and_capped_per_sentence() -> None:
    one = cloze_questions([TEXT], 1, seed=3)
    assert len(one) == 3  # three sentences hold a recurring span
    assert [q.question for q in one] == [q.question for q in cloze_questions([TEXT], 1, seed=3)]
    assert len(cloze_questions([TEXT], 2, seed=3)) == 6
    seeds = {tuple(q.question for q in cloze_questions([TEXT], 1, seed=s)) for s in range(20)}
    assert len(seeds) > 1


def test_every_answer_from_squad_contexts_is_where_it_says() -> None:
    contexts = dict.fromkeys(q.context for q in DATASETS["squad"].examples("train"))
    questions = cloze_questions(contexts, 2, seed=0)
    assert len(questions) > 3 * len(contexts)
    for question in questions:
        (answer,) = question.answers
        assert question.context[answer.start : answer.end] == answer.text
        assert question.question.endswith("?")
