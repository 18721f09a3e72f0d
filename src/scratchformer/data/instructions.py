"""Instructions made from the named datasets: conversations for chat fine-tuning (``sft``),
preference pairs for DPO, and prompts with their gold answers for measuring a chat model.

Each dataset example becomes a question in words and its short answer:

- ``sst2``: is this review positive or negative -> ``positive`` / ``negative``;
- ``squad``: answer from the context (the paragraph and the question) -> the answer's text;
- ``multi30k``: translate to German (English -> German) or to English (German -> English)
  -> the translation;
- ``conll2003``: list the people / the places (its PER / LOC entities, from the BIO tags)
  -> the names, comma-separated, or ``none``.

Each kind of instruction has several phrasings (:data:`KINDS`). :func:`chat_set` makes the
training material from the datasets' ``train`` splits only, its validation slice included
(carved out of them): the datasets' own validation and test splits are left for measuring
a model afterwards, with the prompts of :func:`evaluation_prompts`, in the first phrasing
of each kind. :func:`own_mistakes` makes on-policy preference pairs of them instead: a
model's own wrong answers rejected.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ..config import CHAT_SOURCES
from ..io import atomic_write_text
from .readers import Question, TaggedSentence
from .registry import (
    Dataset,
    LabeledTextDataset,
    ParallelDataset,
    QuestionDataset,
    Root,
    TaggedSentenceDataset,
    named_dataset,
)

TRAINING_SPLIT = "train"
"""The one split that :func:`chat_set` reads."""
NONE = "none"
"""The answer of an entity list that is empty."""
SENTIMENTS = {"0": "negative", "1": "positive"}
"""SST-2's labels -> the answers."""
ENTITY_TYPES = {"people": "PER", "places": "LOC"}
"""The kinds that list entities -> the entity type they list."""
FILES = {
    "train": "train.jsonl",
    "val": "val.jsonl",
    "pairs_train": "pairs-train.jsonl",
    "pairs_val": "pairs-val.jsonl",
}
"""What :func:`write_chat_set` writes, by the part of the set it holds."""
ANSWER_TOKENS = {
    "sentiment": 4,
    "answer": 32,
    "to-german": 64,
    "to-english": 64,
    "people": 32,
    "places": 32,
}
"""New tokens a model is given for an answer of each kind: a word, a phrase, a caption, a
list."""
RAMBLING = (
    "That is an interesting question, and there is quite a lot to consider here. Let me "
    "think it through step by step before I commit. Having thought about it, I would say "
    "{answer}. Then again, {answer}, yes, {answer}. To repeat myself: {answer}.",
    "Well, {answer}. I think it is {answer}, although it may depend on how you look at it, "
    "and I might be wrong. Some would say otherwise. In any case, my answer is {answer}, "
    "{answer}, {answer}.",
    "Great question! Questions like this come up all the time, and they deserve a careful, "
    "complete answer rather than a quick one. So here it is, after much thought: {answer}. "
    "I hope this helps, and let me know if you need anything else!",
)
"""Long-winded responses that bury an answer in padding and repetition: DPO's rejected
responses of the ``rambling`` kind."""


@dataclass(frozen=True)
class Kind:
    """A kind of instruction: the dataset it comes from and its phrasings, format strings
    of the example's fields (the first is the one :func:`evaluation_prompts` uses)."""

    source: str
    phrasings: tuple[str, ...]


KINDS: dict[str, Kind] = {
    "sentiment": Kind(
        "sst2",
        (
            "Is this review positive or negative?\n\n{text}",
            "Review: {text}\n\nWas the reviewer's opinion positive or negative?",
            "Classify the sentiment of this movie review as positive or negative.\n\n{text}",
            "{text}\n\nDoes the review above sound positive or negative? Answer in one word.",
        ),
    ),
    "answer": Kind(
        "squad",
        (
            "Answer the question from the context.\n\nContext: {context}\n\nQuestion: {question}",
            "{context}\n\nUsing only the passage above, answer briefly: {question}",
            "Read the passage and answer the question with a short phrase from it.\n\n"
            "Passage: {context}\nQuestion: {question}",
            "Question: {question}\n\nThe answer is somewhere in this text:\n{context}",
        ),
    ),
    "to-german": Kind(
        "multi30k",
        (
            "Translate to German: {text}",
            "Translate this English sentence into German.\n\n{text}",
            "How would you say this in German?\n{text}",
            "English: {text}\nGive the German translation.",
        ),
    ),
    "to-english": Kind(
        "multi30k",
        (
            "Translate to English: {text}",
            "Translate this German sentence into English.\n\n{text}",
            "What does this German sentence mean in English?\n{text}",
            "German: {text}\nGive the English translation.",
        ),
    ),
    "people": Kind(
        "conll2003",
        (
            "List the people named in this sentence, separated by commas, or say none.\n\n{text}",
            "Which persons does this text mention? Give their names separated by commas, or "
            "'none'.\n\n{text}",
            "{text}\n\nWho are the people in the sentence above? Answer with their names, or none.",
            "Extract the names of people from: {text}",
        ),
    ),
    "places": Kind(
        "conll2003",
        (
            "List the places named in this sentence, separated by commas, or say none.\n\n{text}",
            "Which locations does this text mention? Give them separated by commas, or "
            "'none'.\n\n{text}",
            "{text}\n\nWhich places are named in the sentence above? Answer with their names, "
            "or none.",
            "Extract the names of places from: {text}",
        ),
    ),
}
"""Instruction kinds by name."""


@dataclass(frozen=True)
class Item:
    """One kind of instruction that a dataset example asks: the fields of its phrasings,
    its answers (the first is the one taught; others are accepted too), and wrong answers
    of the same kind to choose a rejected response from (perhaps none)."""

    kind: str
    fields: dict[str, str]
    answers: tuple[str, ...]
    wrong: tuple[str, ...]


@dataclass(frozen=True)
class Example:
    """A dataset example: its group, its text (the examples of one group, e.g. the
    questions of one SQuAD paragraph or a sentence that the dataset repeats, fall on the
    same side of the validation slice), and what makes the items it asks, one a kind (made
    only for the examples drawn)."""

    group: str
    items: Callable[[], tuple[Item, ...]]


@dataclass(frozen=True)
class Instruction:
    """An instruction in words: where it comes from, which phrasing it took, the user's
    message and the gold answers (the first is the one taught)."""

    source: str
    kind: str
    phrasing: int
    prompt: str
    answers: tuple[str, ...]


@dataclass(frozen=True)
class Generated:
    """An instruction of the training material, with the rejected response of its
    preference pair and what kind that is (``wrong``: a wrong answer; ``rambling``: the
    right one, buried in padding; ``own``: a model's own wrong answer)."""

    instruction: Instruction
    rejected: str
    rejected_kind: str


@dataclass(frozen=True)
class ChatSet:
    """Training material: instructions to train on, and the validation slice held back
    (both from the datasets' training splits); their preference pairs, unless other ones
    are given (a model's own mistakes on them: :func:`own_mistakes`)."""

    train: tuple[Generated, ...]
    val: tuple[Generated, ...]
    pairs_train: tuple[Generated, ...] | None = None
    pairs_val: tuple[Generated, ...] | None = None

    def parts(self) -> dict[str, tuple[Generated, ...]]:
        """The instructions of each part of :data:`FILES`; the pairs are made from the
        conversations' own instructions unless other ones were given."""
        return {
            "train": self.train,
            "val": self.val,
            "pairs_train": self.train if self.pairs_train is None else self.pairs_train,
            "pairs_val": self.val if self.pairs_val is None else self.pairs_val,
        }


def entities(tokens: Sequence[str], tags: Sequence[str], entity_type: str) -> list[str]:
    """The entities of ``entity_type`` (``PER``, ``LOC``, ...) that BIO ``tags`` mark on
    ``tokens``, their words joined by spaces, each once, in order of appearance. An
    ``I-`` tag that does not continue an entity of its type starts one."""
    found: list[list[str]] = []
    previous = "O"
    for token, tag in zip(tokens, tags, strict=True):
        if tag[2:] == entity_type and tag[:2] in ("B-", "I-"):
            continues = tag.startswith("I-") and previous[2:] == entity_type
            if continues:
                found[-1].append(token)
            else:
                found.append([token])
        previous = tag
    return list(dict.fromkeys(" ".join(words) for words in found))


def _listed(names: Sequence[str]) -> str:
    """An entity list as an answer: comma-separated, or :data:`NONE`."""
    return ", ".join(names) or NONE


def _different(answer: str, answers: Iterable[str]) -> bool:
    """Whether ``answer`` is none of ``answers``, nor a part of one, nor holds one (case
    aside): a wrong answer, not a shorter or longer form of a right one."""
    answer = answer.casefold()
    return all(answer not in a.casefold() and a.casefold() not in answer for a in answers)


def _dataset(name: str, kind: type[Dataset]) -> Dataset:
    """The named dataset ``name``, which is of ``kind``."""
    dataset = named_dataset(name, kind)
    if dataset is None:
        raise TypeError(f"dataset {name!r} is not a {kind.__name__}")
    return dataset


def _sentiment(split: str, root: Root) -> list[Example]:
    dataset = _dataset("sst2", LabeledTextDataset)
    return [
        Example(row.texts[0], partial(_sentiment_item, row.texts[0], str(row.label)))
        for row in dataset.examples(split, root)
    ]


def _sentiment_item(text: str, label: str) -> tuple[Item, ...]:
    """A wrong sentiment is the other one."""
    answer = SENTIMENTS[label]
    other = next(sentiment for sentiment in SENTIMENTS.values() if sentiment != answer)
    return (Item("sentiment", {"text": text}, (answer,), (other,)),)


def _questions(split: str, root: Root) -> list[Example]:
    dataset = _dataset("squad", QuestionDataset)
    questions = dataset.examples(split, root)
    taught = defaultdict(list)
    for question in questions:
        taught[question.context].append(question.answers[0].text)
    return [
        Example(question.context, partial(_question_item, question, taught[question.context]))
        for question in questions
    ]


def _question_item(question: Question, paragraph_answers: list[str]) -> tuple[Item, ...]:
    """A wrong answer to a question is the answer to another question of its paragraph."""
    answers = tuple(dict.fromkeys(answer.text for answer in question.answers))
    wrong = (other for other in dict.fromkeys(paragraph_answers) if _different(other, answers))
    fields = {"context": question.context, "question": question.question.strip()}
    return (Item("answer", fields, answers, tuple(wrong)),)


def _translations(split: str, root: Root) -> list[Example]:
    dataset = _dataset("multi30k", ParallelDataset)
    pairs = dataset.examples("en-de", split, root)
    return [
        Example(english, partial(_translation_items, pairs, i))
        for i, (english, _) in enumerate(pairs)
    ]


def _translation_items(pairs: list[tuple[str, str]], i: int) -> tuple[Item, ...]:
    """A wrong translation is the translation of a neighbouring caption."""
    english, german = pairs[i]
    neighbours = (pairs[i - 1], pairs[(i + 1) % len(pairs)])
    return (
        Item(
            "to-german",
            {"text": english},
            (german,),
            tuple(de for _, de in neighbours if de != german),
        ),
        Item(
            "to-english",
            {"text": german},
            (english,),
            tuple(en for en, _ in neighbours if en != english),
        ),
    )


def _entity_lists(split: str, root: Root) -> list[Example]:
    dataset = _dataset("conll2003", TaggedSentenceDataset)
    return [
        Example(" ".join(sentence.tokens), partial(_entity_list_items, sentence))
        for sentence in dataset.examples(split, root)
    ]


def _entity_list_items(sentence: TaggedSentence) -> tuple[Item, ...]:
    """A wrong list is ``none`` for names that are there, the list less its last name, or
    the sentence's other entities (its places for people, its people for places)."""
    found = {
        kind: entities(sentence.tokens, sentence.tags, entity_type)
        for kind, entity_type in ENTITY_TYPES.items()
    }
    text = " ".join(sentence.tokens)
    items = []
    for kind, names in found.items():
        answer = _listed(names)
        elsewhere = [name for other in found.values() for name in other if name not in names]
        candidates = [NONE, _listed(names[:-1]), _listed(elsewhere)]
        wrong = tuple(c for c in dict.fromkeys(candidates) if c != answer)
        items.append(Item(kind, {"text": text}, (answer,), wrong))
    return tuple(items)


SOURCES = CHAT_SOURCES
READERS: dict[str, Callable[[str, Root], list[Example]]] = dict(
    zip(SOURCES, (_sentiment, _questions, _translations, _entity_lists), strict=True)
)
"""Sources (named datasets) -> the examples of a split of theirs."""


def _check_source(source: str) -> None:
    if source not in READERS:
        raise ValueError(f"unknown source {source!r}; expected one of {', '.join(SOURCES)}")


def _instruction(item: Item, phrasing: int) -> Instruction:
    kind = KINDS[item.kind]
    prompt = kind.phrasings[phrasing].format(**item.fields)
    return Instruction(kind.source, item.kind, phrasing, prompt, item.answers)


def evaluation_prompts(source: str, split: str = "val", root: Root = None) -> list[Instruction]:
    """The instructions of every example of ``split`` of ``source`` (a validation or test
    split: the training split is refused), every kind it asks, in the first phrasing of
    each kind, with all their reference answers: for measuring a chat model, never for
    training it."""
    _check_source(source)
    if split == TRAINING_SPLIT:
        raise ValueError(
            "evaluation prompts come from a validation or test split, not the training split"
        )
    return [
        _instruction(item, 0)
        for example in READERS[source](split, root)
        for item in example.items()
    ]


def _generated(example: Example, turn: int, rng: random.Random) -> Generated:
    """The instruction of ``example`` whose kind comes ``turn``-th (kinds take turns), in a
    phrasing drawn by ``rng``, with a rejected response: a wrong answer or a rambling one,
    half and half (rambling where there is no wrong answer)."""
    items = example.items()
    item = items[turn % len(items)]
    instruction = _instruction(item, rng.randrange(len(KINDS[item.kind].phrasings)))
    if item.wrong and rng.random() < 0.5:
        return Generated(instruction, rng.choice(item.wrong), "wrong")
    rambling = rng.choice(RAMBLING).format(answer=item.answers[0].rstrip(". "))
    return Generated(instruction, rambling, "rambling")


def _source_set(
    source: str, per_source: int, val_per_source: int, seed: int, root: Root
) -> ChatSet:
    """The instructions of ``source``'s training split: groups in a seeded order, the first
    to make ``val_per_source`` examples held back, then up to ``per_source`` to train on."""
    rng = random.Random(f"{seed}:{source}")
    groups: dict[str, list[Example]] = defaultdict(list)
    for example in READERS[source](TRAINING_SPLIT, root):
        groups[example.group].append(example)
    order = list(groups.values())
    rng.shuffle(order)
    val: list[Example] = []
    train: list[Example] = []
    for group in order:
        part = val if len(val) < val_per_source else train
        part.extend(group)
    val, train = val[:val_per_source], train[:per_source]
    return ChatSet(
        tuple(_generated(example, i, rng) for i, example in enumerate(train)),
        tuple(_generated(example, i, rng) for i, example in enumerate(val)),
    )


def chat_set(
    per_source: int = 2000,
    val_per_source: int = 200,
    seed: int = 0,
    sources: Sequence[str] = SOURCES,
    root: Root = None,
) -> ChatSet:
    """Instructions from the training splits of ``sources`` (no other split is read): up
    to ``per_source`` to train on from each and ``val_per_source`` more held back for
    validation (a SQuAD paragraph's questions all on one side), shuffled together, all
    drawn from ``seed``. A source with several kinds (``multi30k``, ``conll2003``) gives
    each the same share."""
    if per_source < 1 or val_per_source < 1:
        raise ValueError(
            f"per_source={per_source} and val_per_source={val_per_source} must both be >= 1"
        )
    sources = tuple(dict.fromkeys(sources))
    for source in sources:
        _check_source(source)
    parts = [_source_set(source, per_source, val_per_source, seed, root) for source in sources]
    rng = random.Random(seed)
    train = [generated for part in parts for generated in part.train]
    val = [generated for part in parts for generated in part.val]
    rng.shuffle(train)
    rng.shuffle(val)
    return ChatSet(tuple(train), tuple(val))


def _normalized(text: str) -> str:
    """A text's words, lower-cased, without punctuation or spacing."""
    return " ".join(re.findall(r"\w+", text.casefold()))


def is_right(answer: str, answers: Sequence[str]) -> bool:
    """Whether ``answer`` is one of the gold ``answers``, case, punctuation and spacing
    aside."""
    return _normalized(answer) in {_normalized(gold) for gold in answers}


def own_mistakes(
    generated: Sequence[Generated], answers: Sequence[str | None]
) -> tuple[Generated, ...]:
    """On-policy preference pairs: each instruction that a model answered wrongly (its
    answer ``answers[i]`` is none of the gold ones), its own answer as the rejected response
    (``own``), so that DPO prefers the gold answer over the model's actual mistake, as in
    SPIN's pairs (Chen et al. 2024). Those it answered right, or was not asked (None), are
    left out, and so are empty answers: a pair's responses are never empty."""
    return tuple(
        Generated(g.instruction, answer, "own")
        for g, answer in zip(generated, answers, strict=True)
        if answer and not is_right(answer, g.instruction.answers)
    )


def chats(generated: Sequence[Generated], system: str | None = None) -> list[list[dict[str, str]]]:
    """The messages that ask each instruction (the system's, if any, and the user's)."""
    return [_opening(system, g.instruction.prompt) for g in generated]


def _opening(system: str | None, prompt: str) -> list[dict[str, str]]:
    """The messages before the answer: the system's (if any) and the user's."""
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": prompt}]


def conversation(generated: Generated, system: str | None = None) -> dict[str, Any]:
    """A line of an ``sft`` file: the instruction and its answer as ``messages``, and
    where it comes from (``source``, ``kind``, ``phrasing``)."""
    instruction = generated.instruction
    answer = {"role": "assistant", "content": instruction.answers[0]}
    return {
        "messages": [*_opening(system, instruction.prompt), answer],
        **_origin(instruction),
    }


def preference_pair(generated: Generated, system: str | None = None) -> dict[str, Any]:
    """A line of a ``dpo`` file, in TRL's conversational form: the ``prompt``'s messages,
    the ``chosen`` answer and the ``rejected`` one as the assistant's messages, and where
    it comes from (as :func:`conversation`, with ``rejected_kind``)."""
    instruction = generated.instruction
    return {
        "prompt": _opening(system, instruction.prompt),
        "chosen": [{"role": "assistant", "content": instruction.answers[0]}],
        "rejected": [{"role": "assistant", "content": generated.rejected}],
        **_origin(instruction),
        "rejected_kind": generated.rejected_kind,
    }


def _origin(instruction: Instruction) -> dict[str, Any]:
    return {
        "source": instruction.source,
        "kind": instruction.kind,
        "phrasing": instruction.phrasing,
    }


def _jsonl(records: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


def write_chat_set(out: str | Path, chat: ChatSet, system: str | None = None) -> dict[str, Path]:
    """Write ``chat`` into the directory ``out`` (made if need be) as the files of
    :data:`FILES`: conversations (``train.jsonl``, ``val.jsonl``) and preference pairs
    (``pairs-train.jsonl``, ``pairs-val.jsonl``), each file written atomically. Returns
    the files by part."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    contents = {
        part: _jsonl(
            (preference_pair if part.startswith("pairs") else conversation)(g, system)
            for g in generated
        )
        for part, generated in chat.parts().items()
    }
    paths = {part: out / FILES[part] for part in contents}
    for part, text in contents.items():
        atomic_write_text(paths[part], text)
    return paths
