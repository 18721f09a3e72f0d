"""The attention captured for pictures is the model's own, on the input as the task
encodes it, for every kind of run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from scratchformer.config import Recipe
from scratchformer.models import build_model
from scratchformer.tasks import Task, build_task
from scratchformer.viz import capture_attention

SMALL = {"d_model": 16, "n_heads": 2, "n_layers": 2, "d_ff": 32, "max_len": 64}


def prepared(task: str, data: dict, **model: object) -> tuple[Task, torch.nn.Module]:
    recipe = Recipe.from_dict({"task": task, "model": {**SMALL, **model}, "data": data})
    runnable = build_task(recipe)
    runnable.prepare()
    return runnable, build_model(runnable.model_config()).eval()


def prepared_on_pairs(task: str, tmp_path: Path) -> tuple[Task, torch.nn.Module]:
    """A ``task`` of sentence pairs with scores, from a small TSV file."""
    data = tmp_path / "pairs.tsv"
    data.write_text("a man plays\ta man sings\t4.0\nthe cat\tthe dog\t1.0\n" * 3)
    columns = {"text_columns": [0, 1], "label_column": 2, "header": False}
    return prepared(task, {"train": str(data), **columns})


def assert_rows_sum_to_one(weights: torch.Tensor) -> None:
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_translation_shows_source_against_target_tokens() -> None:
    task, model = prepared(
        "synthetic", {"dataset": "reverse", "synthetic": {"train_size": 50}, "tokenizer": "char"}
    )
    maps = capture_attention(task, model, "1234", target="4321")
    assert maps.kinds == ["encoder", "decoder", "cross"]
    source = task.source_tokenizer()
    target = task.target_tokenizer()
    src_ids = source.encode("1234", add_eos=True)
    tgt_ids = target.encode("4321", add_bos=True)
    assert (
        maps.keys["cross"] == source.tokens(src_ids) == [*"1234", *source.tokens([source.eos_id])]
    )
    assert maps.queries["cross"] == target.tokens(tgt_ids)
    assert maps.queries["decoder"] == maps.keys["decoder"] == maps.queries["cross"]
    out = model(torch.tensor([src_ids]), torch.tensor([tgt_ids]), need_weights=True)
    for kind in maps.kinds:
        expected = torch.cat(out.attentions[kind])
        assert maps.weights[kind].shape == (2, 2, *expected.shape[2:])
        torch.testing.assert_close(maps.weights[kind], expected)
        assert_rows_sum_to_one(maps.weights[kind])
    causal_future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    assert maps.weights["decoder"][..., causal_future].abs().max() == 0


def test_translation_without_target_attends_over_its_greedy_output() -> None:
    task, model = prepared("synthetic", {"dataset": "copy", "synthetic": {"train_size": 50}})
    greedy = task.translate(model, ["907"], beam_size=1)[0]
    maps = capture_attention(task, model, "907")
    assert len(maps.queries["cross"]) == 1 + len(task.target_tokenizer().encode(greedy))


def test_language_model_attention_is_causal(tmp_path: Path) -> None:
    text = tmp_path / "text.txt"
    text.write_text("to be or not to be\n" * 5)
    task, model = prepared(
        "lm", {"train": str(text), "tokenizer": "char"}, positional="learned", norm_first=True
    )
    maps = capture_attention(task, model, "not to be")
    assert maps.kinds == ["decoder"]
    assert maps.queries["decoder"] == list("not␣to␣be")
    out = model(torch.tensor([task.tokenizer().encode("not to be")]), need_weights=True)
    torch.testing.assert_close(maps.weights["decoder"], torch.cat(out.attentions["decoder"]))
    assert maps.weights["decoder"][..., torch.ones(9, 9, dtype=torch.bool).triu(1)].sum() == 0
    with pytest.warns(UserWarning, match="the text has 71 tokens: the model sees its first 64"):
        maps = capture_attention(task, model, "to be " * 11 + "or or")
    assert len(maps.queries["decoder"]) == 64


def test_sentence_pairs_use_their_segments(tmp_path: Path) -> None:
    task, model = prepared_on_pairs("regression", tmp_path)
    maps = capture_attention(task, model, "a man plays\tthe dog")
    tokens = maps.queries["encoder"]
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2
    [encoded] = task.encode_inputs([["a man plays", "the dog"]], [0])
    out = model(
        torch.tensor([encoded.ids]),
        token_type_ids=torch.tensor([encoded.segments]),
        need_weights=True,
    )
    assert torch.tensor(encoded.segments).sum() > 0
    torch.testing.assert_close(maps.weights["encoder"], torch.cat(out.attentions["encoder"]))
    assert_rows_sum_to_one(maps.weights["encoder"])


def test_similarity_model_reads_one_sentence(tmp_path: Path) -> None:
    """A bi-encoder encodes each sentence alone: the picture is of one sentence, as the
    model sees it within a pair."""
    task, model = prepared_on_pairs("similarity", tmp_path)
    maps = capture_attention(task, model, "a man plays")
    tokens = maps.queries["encoder"]
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens.count("[SEP]") == 1
    first, second = task.sentence_ids("a man plays"), task.sentence_ids("the cat")
    ids = torch.zeros(2, len(first), dtype=torch.long)
    ids[0], ids[1, : len(second)] = torch.tensor(first), torch.tensor(second)
    out = model(ids, ids != 0, need_weights=True)
    within_pair = torch.cat([layer[:1] for layer in out.attentions["encoder"]])
    torch.testing.assert_close(maps.weights["encoder"], within_pair)


def test_tagger_reads_words(tmp_path: Path) -> None:
    data = tmp_path / "train.txt"
    data.write_text("Peter B-PER\nwent O\nto O\nParis B-LOC\n\n")
    task, model = prepared("tagging", {"train": str(data), "tokenizer": "char"})
    maps = capture_attention(task, model, "Peter  went")
    assert maps.keys["encoder"] == list("Peterwent")


def test_mistakes_are_clear_errors(tmp_path: Path) -> None:
    task, model = prepared("synthetic", {"dataset": "copy", "synthetic": {"train_size": 50}})
    with pytest.raises(ValueError, match="the text is empty"):
        capture_attention(task, model, "  ")
    maps = capture_attention(task, model, "12", target="12")
    with pytest.raises(ValueError, match="layer=2 is out of range: the model has 2 layers"):
        maps.select("cross", 2, 0)
    text = tmp_path / "t.txt"
    text.write_text("abc\n")
    lm, lm_model = prepared("lm", {"train": str(text), "tokenizer": "char"})
    with pytest.raises(ValueError, match="a target is for translation models, not for a lm run"):
        capture_attention(lm, lm_model, "ab", target="x")
    with pytest.raises(ValueError, match="this model has no cross attention; it has decoder"):
        capture_attention(lm, lm_model, "ab").select("cross", 0, 0)
