"""Instructions from the named datasets: what the training material reads (the training
splits only), its files (read back by the ``sft`` and ``dpo`` readers), its draws, and the
evaluation prompts of the validation splits."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from scratchformer.data import instructions
from scratchformer.data.instructions import (
    KINDS,
    SOURCES,
    ChatSet,
    Example,
    Instruction,
    Item,
    chat_set,
    entities,
    evaluation_prompts,
    is_right,
    own_mistakes,
    write_chat_set,
)
from scratchformer.data.preferences import iter_preferences
from scratchformer.data.readers import TaggedSentence, read_chat
from scratchformer.data.registry import DatasetSpec

PER_SOURCE, VAL = 48, 12


@pytest.fixture(scope="module")
def built(data_dir: Path) -> tuple[ChatSet, list[str]]:
    """A small set from the shared datasets, and the names of the files it asked for."""
    asked: list[str] = []
    file = DatasetSpec.file

    def recording(spec: DatasetSpec, split: str, lang: str | None = None, root=None) -> Path:
        path = file(spec, split, lang, root)
        asked.append(path.name)
        return path

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatasetSpec, "file", recording)
        chat = chat_set(PER_SOURCE, VAL, seed=3)
    return chat, asked


@pytest.fixture(scope="module")
def evaluation(data_dir: Path) -> dict[str, list[Instruction]]:
    """The evaluation prompts of each source's validation split."""
    return {source: evaluation_prompts(source) for source in SOURCES}


def test_only_the_training_splits_are_read(built, evaluation) -> None:
    chat, asked = built
    assert set(asked) == {"train.tsv", "train.json", "train.en.gz", "train.de.gz", "train.txt"}
    texts = [
        message["content"]
        for generated in chat.train + chat.val
        for message in instructions.conversation(generated)["messages"]
    ]
    sentences = [  # the sentence is the last line of the first phrasings; a caption the answer
        prompt.answers[0] if source == "multi30k" else prompt.prompt.split("\n")[-1]
        for source in ("sst2", "multi30k", "conll2003")
        for prompt in evaluation[source]
    ]
    held_out = {sentence for sentence in sentences if len(sentence.split()) > 12}
    assert len(held_out) > 1000
    assert not [sentence for sentence in held_out if any(sentence in text for text in texts)]


def test_the_files_load_with_the_sft_and_dpo_readers(built, tmp_path: Path) -> None:
    chat, _ = built
    paths = write_chat_set(tmp_path / "chat", chat, system="Answer briefly.")
    assert sorted(path.name for path in paths.values()) == sorted(
        ["train.jsonl", "val.jsonl", "pairs-train.jsonl", "pairs-val.jsonl"]
    )
    for part, generated in (("train", chat.train), ("val", chat.val)):
        conversations = read_chat(paths[part])
        pairs = list(iter_preferences(paths[f"pairs_{part}"]))
        assert len(conversations) == len(pairs) == len(generated)
        for conversation, pair, made in zip(conversations, pairs, generated, strict=True):
            roles = [message["role"] for message in conversation.messages]
            assert roles == ["system", "user", "assistant"]
            assert pair.prompt == conversation.messages[:2]
            assert pair.chosen == conversation.messages[2]["content"] == made.instruction.answers[0]
            assert pair.rejected == made.rejected


def test_every_source_kind_and_phrasing_occurs_in_balance(built) -> None:
    chat, _ = built
    for part, size in ((chat.train, PER_SOURCE), (chat.val, VAL)):
        assert Counter(g.instruction.source for g in part) == dict.fromkeys(SOURCES, size)
        shares = Counter(kind.source for kind in KINDS.values())
        expected = {name: size // shares[kind.source] for name, kind in KINDS.items()}
        assert Counter(g.instruction.kind for g in part) == expected
    phrasings = {(g.instruction.kind, g.instruction.phrasing) for g in chat.train}
    assert phrasings == {(kind, i) for kind in KINDS for i in range(len(KINDS[kind].phrasings))}
    assert all(len(kind.phrasings) >= 4 for kind in KINDS.values())
    train_prompts = {g.instruction.prompt for g in chat.train}
    assert not train_prompts & {g.instruction.prompt for g in chat.val}


def test_rejected_responses_are_wrong_or_rambling(built) -> None:
    chat, _ = built
    generated = chat.train + chat.val
    assert {g.rejected_kind for g in generated} == {"wrong", "rambling"}
    assert {g.instruction.kind for g in generated if g.rejected_kind == "wrong"} == set(KINDS)
    for g in generated:
        answers = g.instruction.answers
        assert g.rejected not in answers
        if g.rejected_kind == "rambling":
            assert g.rejected.count(answers[0].rstrip(". ")) >= 1
            assert len(g.rejected) > len(answers[0]) + 100


def test_sentiment_answers_and_squad_answers_in_their_context(built) -> None:
    chat, _ = built
    for g in chat.train + chat.val:
        instruction = g.instruction
        if instruction.kind == "sentiment":
            assert instruction.answers[0] in ("positive", "negative")
            assert g.rejected_kind == "rambling" or {g.rejected, instruction.answers[0]} == {
                "positive",
                "negative",
            }
        if instruction.kind == "answer":
            assert all(answer in instruction.prompt for answer in instruction.answers)
            if g.rejected_kind == "wrong":  # another question's answer, from the same paragraph
                assert g.rejected in instruction.prompt


def test_entities_from_bio_tags() -> None:
    tagged = (
        "Peter/B-PER Blackburn/I-PER met/O Anna/B-PER in/O New/B-LOC York/I-LOC ,/O then/O "
        "Blackburn/I-PER Peter/B-PER Blackburn/I-PER and/O Paris/B-LOC"
    )
    tokens, tags = zip(*(word.split("/") for word in tagged.split()), strict=True)
    assert entities(tokens, tags, "PER") == ["Peter Blackburn", "Anna", "Blackburn"]
    assert entities(tokens, tags, "LOC") == ["New York", "Paris"]
    assert entities(tokens, tags, "ORG") == []
    assert entities(["Rome", "Milan"], ["B-LOC", "B-LOC"], "LOC") == ["Rome", "Milan"]
    assert entities(["New", "York"], ["B-LOC", "I-PER"], "PER") == ["York"]
    people, places = instructions._entity_list_items(TaggedSentence(tokens, tags, 1))
    assert people.answers == ("Peter Blackburn, Anna, Blackburn",)
    assert people.wrong == ("none", "Peter Blackburn, Anna", "New York, Paris")
    assert places.answers == ("New York, Paris",)
    assert places.wrong == ("none", "New York", "Peter Blackburn, Anna, Blackburn")


def test_entity_lists_answer_and_reject(built) -> None:
    chat, _ = built
    lists = [g for g in chat.train + chat.val if g.instruction.source == "conll2003"]
    answers = Counter(g.instruction.answers[0] == "none" for g in lists)
    assert answers[True] and answers[False]
    for g in lists:  # "none", or names that the sentence holds
        if g.rejected_kind == "wrong" and g.rejected != "none":
            assert all(name in g.instruction.prompt for name in g.rejected.split(", "))


def synthetic(split: str, root: object) -> list[Example]:
    """Twenty groups of three examples, a group's examples answered alike."""
    return [
        Example(
            f"group {g}", lambda g=g, i=i: (Item("sentiment", {"text": f"{g}.{i}"}, (str(g),), ()),)
        )
        for g in range(20)
        for i in range(3)
    ]


def test_draws_follow_the_seed_and_groups_stay_on_one_side(monkeypatch) -> None:
    monkeypatch.setitem(instructions.READERS, "sst2", synthetic)
    first, again, other = (chat_set(20, 10, seed, ["sst2"]) for seed in (0, 0, 1))
    assert first == again
    assert first != other
    assert (len(first.train), len(first.val)) == (20, 10)
    val_groups = {g.instruction.answers[0] for g in first.val}
    assert not val_groups & {g.instruction.answers[0] for g in first.train}


def test_evaluation_prompts_are_the_validation_splits_in_the_first_phrasing(evaluation) -> None:
    sizes = {"sst2": 872, "squad": 1168, "multi30k": 2 * 1014, "conll2003": 2 * 3250}
    for source, size in sizes.items():
        prompts = evaluation[source]
        assert len(prompts) == size
        assert {prompt.phrasing for prompt in prompts} == {0}
        assert {prompt.source for prompt in prompts} == {source}
    squad = evaluation["squad"]
    assert max(len(prompt.answers) for prompt in squad) > 1
    assert squad[0].prompt.startswith("Answer the question from the context.\n\nContext: ")
    with pytest.raises(ValueError, match="not the training split"):
        evaluation_prompts("sst2", "train")
    with pytest.raises(ValueError, match="unknown source 'stsb'"):
        evaluation_prompts("stsb")


def test_own_mistakes_reject_the_wrong_answers_only(built) -> None:
    chat, _ = built
    asked = chat.train[:4]
    gold = [g.instruction.answers[0] for g in asked]
    answers = [f" {gold[0].upper()}. ", "something else", None, ""]
    pairs = own_mistakes(asked, answers)
    assert [(p.instruction, p.rejected, p.rejected_kind) for p in pairs] == [
        (asked[1].instruction, "something else", "own")
    ]
    assert is_right("Paris, France!", ["paris france"]) and not is_right("Paris", ["France"])
    with pytest.raises(ValueError):
        own_mistakes(asked, answers[:3])


def test_the_pairs_of_a_set_may_be_others_than_its_conversations(built, tmp_path: Path) -> None:
    chat, _ = built
    pairs = own_mistakes(chat.train[:3], ["wrong one", "wrong two", "wrong three"])
    paths = write_chat_set(tmp_path, ChatSet(chat.train, chat.val, pairs_train=pairs))
    assert len(read_chat(paths["train"])) == len(chat.train)
    assert [p.rejected for p in iter_preferences(paths["pairs_train"])] == [
        "wrong one",
        "wrong two",
        "wrong three",
    ]
    assert len(list(iter_preferences(paths["pairs_val"]))) == len(chat.val)
