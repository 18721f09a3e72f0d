"""Structured output's masks: texts drawn at random under them follow their grammar (checked
by ``jsonschema``, ``re`` and the choices themselves), eos comes exactly when the grammar is
complete, and what cannot be compiled or spelled is refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import torch

from interop.conftest import sentencepiece_bpe, sentencepiece_unigram
from scratchformer.data.tokenizer import Tokenizer
from scratchformer.inference.grammar import (
    Constraint,
    Grammar,
    fill_masks,
    grammar_tokenizer,
)

BPE_VOCAB = 1000
MODEL_VOCAB = 1032
"""Wider than the tokenizers' vocabularies, as a model's may be."""
DRAWS = 100
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 4},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user", 3]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 2}, "maxItems": 2},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 3},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                "points": {"type": "array", "items": {"type": "number"}, "maxItems": 2},
            },
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "role", "address"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def bpe(data_dir: Path) -> Tokenizer:
    """Byte-level BPE (GPT-2's kind) from the start of tinyshakespeare and some JSON."""
    text = (data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:50_000]
    lines = text.splitlines() + [json.dumps(SCHEMA)] * 20
    return Tokenizer.train("bpe", lines, BPE_VOCAB, ("pad", "bos", "eos"))


def draw(
    constraints: list[Constraint], tokenizer: Tokenizer, generator: torch.Generator
) -> list[list[int]]:
    """Token ids sampled from random logits (temperature 1) under the masks, all rows at
    once, each up to its eos; checked at each step: only the tokenizer's ids are allowed and
    no special token but eos, eos exactly when the grammar is complete, and only eos once
    the grammar is finished."""
    ids: list[list[int]] = [[] for _ in constraints]
    active = list(range(len(constraints)))
    for _ in range(400):
        if not active:
            return ids
        rows = [constraints[i] for i in active]
        masks = torch.empty(len(rows), rows[0].vocab, dtype=torch.bool)
        fill_masks(rows, masks)
        eos = rows[0].eos_id
        others = [i for i in tokenizer.special_ids if i != eos]
        assert not masks[:, tokenizer.vocab_size :].any() and not masks[:, others].any()
        assert masks[:, eos].tolist() == [row.complete for row in rows]
        for row, mask in zip(rows, masks, strict=True):
            assert not row.finished or mask.sum() == 1
        logits = torch.randn(masks.shape, generator=generator).masked_fill(~masks, -torch.inf)
        tokens = torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0].tolist()
        for i, row, token in zip(list(active), rows, tokens, strict=True):
            if token == eos:
                active.remove(i)
            else:
                row.advance(token)
                ids[i].append(token)
    raise AssertionError(f"{len(active)} rows without eos after 400 tokens")


def texts(grammar: Grammar, tokenizer: Tokenizer, n: int = DRAWS) -> list[str]:
    generator = torch.Generator().manual_seed(0)
    constraints = [Constraint(grammar, tokenizer, MODEL_VOCAB) for _ in range(n)]
    return [tokenizer.decode(ids) for ids in draw(constraints, tokenizer, generator)]


def test_random_texts_under_a_schema_validate(bpe) -> None:
    found = [json.loads(text) for text in texts(Grammar("json_schema", SCHEMA), bpe)]
    for value in found:
        jsonschema.validate(value, SCHEMA)
    assert {value["role"] for value in found} == {"admin", "user", 3}
    assert any(value["address"].get("points") for value in found)


def test_json_object_is_any_object(bpe) -> None:
    constraint = Constraint(Grammar("json_object"), bpe, MODEL_VOCAB)
    mask = torch.empty(MODEL_VOCAB, dtype=torch.bool)
    constraint.fill(mask)
    starts = {bpe.decode([token])[0] for token in mask.nonzero()[:, 0].tolist()}
    assert starts == {"{"}
    for token in bpe.encode('{"a": [1, {"b": null}], "c": "d"}'):
        assert not constraint.complete
        constraint.advance(token)
    assert constraint.complete and constraint.finished


def test_random_texts_match_the_regex(bpe) -> None:
    pattern = r"[0-9]{3}-[a-z]{2,5}( ok)?"
    found = texts(Grammar("regex", pattern), bpe)
    assert all(re.fullmatch(pattern, text) for text in found)
    assert len(set(found)) > DRAWS // 2


def test_random_texts_are_among_the_choices(bpe) -> None:
    choices = ["yes", "no", 'a "quoted" one', "yes and no"]
    found = texts(Grammar("choice", choices), bpe)
    assert set(found) == set(choices)


def test_the_batch_fills_the_masks_each_row_fills_alone(bpe) -> None:
    grammars = [Grammar("json_schema", SCHEMA), Grammar("regex", "[a-z]+"), Grammar("json_object")]
    constraints = [Constraint(g, bpe, MODEL_VOCAB) for g in grammars]
    for constraint, text in zip(constraints, ['{"name": "ab', "abc", "{"], strict=True):
        for token in bpe.encode(text):
            constraint.advance(token)
    batch = torch.ones(len(constraints), MODEL_VOCAB, dtype=torch.bool)
    fill_masks(constraints, batch)
    for constraint, row in zip(constraints, batch, strict=True):
        alone = torch.zeros(MODEL_VOCAB, dtype=torch.bool)
        constraint.fill(alone)
        assert torch.equal(row, alone)
    assert batch[1, bpe.eos_id] and not batch[0, bpe.eos_id]


def test_a_token_the_grammar_forbids_is_refused(bpe) -> None:
    constraint = Constraint(Grammar("regex", "[0-9]+"), bpe, MODEL_VOCAB)
    with pytest.raises(ValueError, match="breaks the grammar"):
        constraint.advance(bpe.encode("a")[0])


@pytest.mark.parametrize(
    ("grammar", "message"),
    [
        (Grammar("json_schema", {"type": "object", "properties": {"a": {"type": "foo"}}}), "foo"),
        (Grammar("json_schema", {"type": "string", "format": "no-such-format"}), "format"),
        (Grammar("json_schema", {"if": {"type": "object"}}), "Unimplemented keys"),
        (Grammar("regex", "(ab"), "unclosed group"),
        (Grammar("choice", []), "non-empty"),
    ],
)
def test_what_cannot_compile_is_a_value_error_with_the_reason(bpe, grammar, message) -> None:
    with pytest.raises(ValueError, match=message):
        Constraint(grammar, bpe, MODEL_VOCAB)


def test_the_model_vocab_must_hold_the_tokenizers(bpe) -> None:
    with pytest.raises(ValueError, match=f"smaller than the tokenizer's {BPE_VOCAB}"):
        Constraint(Grammar("json_object"), bpe, BPE_VOCAB - 1)


def test_the_library_spells_byte_level_tokens_as_its_own_reading_does(bpe) -> None:
    import llguidance

    ours = grammar_tokenizer(bpe)
    assert grammar_tokenizer(bpe) is ours
    theirs = llguidance.LLTokenizer(bpe.to_json(), n_vocab=BPE_VOCAB, eos_token=bpe.eos_id)
    for token in range(3, BPE_VOCAB):  # past the specials
        assert ours.decode_bytes([token]) == theirs.decode_bytes([token])


def test_char_tokenizers_spell_their_characters(data_dir: Path) -> None:
    text = (data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:5_000]
    char = Tokenizer.train("char", [text + '{}"0123456789:,é'], 100, ("pad", "eos"))
    found = texts(Grammar("regex", "[0-9]{2}é?"), char, 20)
    assert all(re.fullmatch("[0-9]{2}é?", t) for t in found)


@pytest.mark.parametrize("backend", [sentencepiece_bpe, lambda: sentencepiece_unigram(200, 10)])
def test_sentencepiece_tokens_spell_spaces_and_bytes(backend) -> None:
    tokenizer = Tokenizer(backend())
    ids = tokenizer.encode("the fox, café")
    spelled = grammar_tokenizer(tokenizer).decode_bytes(ids).decode("utf-8")
    assert spelled == " " + tokenizer.decode(ids)  # their decoders strip the leading space


def test_wordpiece_and_eos_less_tokenizers_are_refused(data_dir: Path) -> None:
    text = (data_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:5_000]
    wordpiece = Tokenizer.train("wordpiece", text.splitlines(), 200, ("unk", "eos"))
    with pytest.raises(ValueError, match="WordPiece"):
        grammar_tokenizer(wordpiece)
    no_eos = Tokenizer.train("bpe", text.splitlines(), 300, ("pad",))
    with pytest.raises(ValueError, match="eos token"):
        grammar_tokenizer(no_eos)
