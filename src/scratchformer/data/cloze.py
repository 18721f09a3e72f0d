"""Cloze questions: extractive-QA training examples made from unlabelled paragraphs.

A name or number that a paragraph mentions twice is an answer waiting for a question. Take
a sentence holding one mention, put a question word in its place ("In 1066 the Normans
crossed" -> "when the Normans crossed?"), take the sentence out of the paragraph, and the
other mention is the answer in what is left: to find it, a reader has to match the
question's words against the context, the skill SQuAD's questions test. This is the
"cloze" pretraining of Dhingra et al. (2018) and Lewis et al. (2019), with Splinter's
recurring spans (Ram et al. 2021) as the answers; it lets a small labelled set of questions
be joined by as many made from its own contexts.

A span qualifies when it is at most ``MAX_SPAN_WORDS`` words, its first and last words are
names or numbers (a capital or a digit; a sentence's first word only with a digit, as its
capital says nothing), a single word is not also used in lower case in the paragraph ("The"),
and it occurs again, whole and with the same case, outside its sentence.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Iterable

from .readers import Answer, Question
from .text import Span, sentences

MAX_SPAN_WORDS = 5
WORD = re.compile(r"\w+(?:[-'.,]\w+)*")
"""A word: letters and digits, with inner hyphens, apostrophes, points and commas (3.5, 1,000)."""
RUN = re.compile(r"\w+")
"""A run of word characters: phrases begin and end on their edges (``_occurs``)."""
YEAR = re.compile(r"(1[0-9]{3}|20[0-9]{2})s?")
NUMBER = re.compile(r"[0-9][0-9.,]*")


def _name_or_number(word: str, first_of_sentence: bool) -> bool:
    """Whether ``word`` has a digit, or a capital that is not merely the sentence's."""
    has_digit = any(c.isdigit() for c in word)
    return has_digit or (word[0].isupper() and not first_of_sentence)


def _lower_case_word(word: str, text: str) -> bool:
    """Whether ``word`` is a common word capitalised: ``text`` also has it in lower case."""
    return word.lower() != word and bool(_occurrences(word.lower(), text))


def _occurs(phrase: str, text: str) -> re.Match[str] | None:
    """The first occurrence of ``phrase`` in ``text`` as whole words."""
    return re.search(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)", text)


@functools.lru_cache(maxsize=2 * MAX_SPAN_WORDS)
def _phrases(text: str, runs: int) -> dict[str, list[Span]]:
    """Where each phrase of ``runs`` consecutive runs of word characters occurs in ``text``:
    every occurrence that :func:`_occurs` could find, indexed once for all the sentences of
    a paragraph."""
    bounds = [m.span() for m in RUN.finditer(text)]
    found: dict[str, list[Span]] = {}
    for (start, _), (_, end) in zip(bounds, bounds[runs - 1 :], strict=False):
        found.setdefault(text[start:end], []).append((start, end))
    return found


def _occurrences(phrase: str, text: str) -> list[Span]:
    """Where ``phrase`` occurs in ``text`` as whole words (:func:`_phrases`)."""
    return _phrases(text, len(RUN.findall(phrase))).get(phrase, [])


def _occurs_outside(phrase: str, text: str, sentence: Span) -> bool:
    """Whether ``phrase`` occurs in ``text``, as whole words, outside ``sentence``."""
    begin, finish = sentence
    return any(end <= begin or finish <= start for start, end in _occurrences(phrase, text))


def recurring_spans(text: str, sentence: Span) -> list[Span]:
    """The longest qualifying spans of ``sentence`` (module docstring) that also occur in
    ``text`` outside it, none inside another."""
    begin, finish = sentence
    words = [(m.start() + begin, m.end() + begin) for m in WORD.finditer(text[begin:finish])]
    named = [_name_or_number(text[start:end], i == 0) for i, (start, end) in enumerate(words)]
    found: list[Span] = []
    for i in range(len(words)):
        for n in range(min(MAX_SPAN_WORDS, len(words) - i), 0, -1):
            if not (named[i] and named[i + n - 1]):
                continue
            (start, first_end), (_, end) = words[i], words[i + n - 1]
            first = text[start:first_end]
            if n == 1 and (len(first) < 2 or _lower_case_word(first, text)):
                continue
            if _occurs_outside(text[start:end], text, sentence):
                found.append((start, end))
                break
    return [s for s in found if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in found)]


def question_word(answer: str) -> str:
    """``when`` for a year, ``how many`` for another number, else ``what``."""
    if YEAR.fullmatch(answer):
        return "when"
    if NUMBER.fullmatch(answer):
        return "how many"
    return "what"


def cloze_question(text: str, sentence: Span, span: Span, key: str) -> Question:
    """The question that ``span`` of ``sentence`` makes: the sentence with a question word
    in the span's place, asked of ``text`` without the sentence, answered by the span's
    first occurrence there."""
    begin, finish = sentence
    start, end = span
    phrase = text[start:end]
    asked = text[begin:start] + question_word(phrase) + text[end:finish]
    asked = asked.rstrip().rstrip(".!?").rstrip() + "?"
    context = (text[:begin].rstrip() + " " + text[finish:].lstrip()).strip()
    match = _occurs(phrase, context)
    assert match is not None, "a recurring span occurs outside its sentence"
    return Question(key, asked, context, (Answer(phrase, match.start()),), key)


def cloze_questions(contexts: Iterable[str], per_sentence: int, seed: int) -> list[Question]:
    """Up to ``per_sentence`` cloze questions from each sentence of each context, the spans
    drawn at random (seeded) among those that qualify."""
    rng = random.Random(seed)
    questions = []
    for c, text in enumerate(contexts):
        for s, sentence in enumerate(sentences(text)):
            spans = recurring_spans(text, sentence)
            for k, span in enumerate(rng.sample(spans, min(per_sentence, len(spans)))):
                questions.append(cloze_question(text, sentence, span, f"cloze:{c}:{s}:{k}"))
    return questions
