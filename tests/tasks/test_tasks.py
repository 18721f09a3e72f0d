"""Tasks on small local files: what they read, encode and batch, and their errors."""

from __future__ import annotations

import gc
import gzip
import math
import re
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from scratchformer.config import Recipe
from scratchformer.data.corpus import corpus_documents, split_held_out
from scratchformer.data.readers import DataError
from scratchformer.inference import greedy_decode
from scratchformer.models import build_model
from scratchformer.nn.loss import IGNORE_INDEX
from scratchformer.tasks import build_task


def recipe(task: str, **sections: dict) -> Recipe:
    return Recipe.from_dict({"task": task, **sections})


PAIRS = "a man plays\ta man sings\t4.0\nthe cat\tthe dog\t1.0\n"
"""Two scored sentence pairs, a TSV file's lines."""


def pair_data(tmp_path: Path, rows: str = PAIRS, **settings: Any) -> dict[str, Any]:
    """The data section of a task reading ``rows`` of scored pairs as its training and
    validation file, with ``settings``."""
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(rows)
    return {
        "train": str(pairs),
        "val": str(pairs),
        "text_columns": [0, 1],
        "label_column": 2,
        "header": False,
        **settings,
    }


def test_classification_from_a_local_tsv(tmp_path: Path) -> None:
    train, val = tmp_path / "train.tsv", tmp_path / "val.tsv"
    train.write_text("text\tlabel\ngood fun film\tpos\ndull and slow\tneg\nfun\tpos\n")
    val.write_text("text\tlabel\nslow film\tneg\nbad\tmeh\n")
    data = {
        "train": str(train),
        "val": str(val),
        "text_columns": ["text"],
        "label_column": "label",
        "tokenizer": "wordpiece",
        "vocab_size": 60,
    }
    task = build_task(recipe("classification", data=data, train={"batch_size": 2}))
    task.prepare()
    assert task.labels() == ["neg", "pos"]
    config = task.model_config()
    assert (config.arch, config.head, config.num_labels) == ("encoder", "classification", 2)
    batch = task.global_batch(0, 1)
    tokenizer = task.tokenizer()
    assert batch.inputs["input_ids"][:, 0].eq(tokenizer.cls_id).all()
    assert sorted(batch.targets.tolist()) in ([0, 1], [1, 1])
    with pytest.raises(DataError, match=rf"^{val}:3: label 'meh' is not one of"):
        task.examples("val")


@pytest.mark.parametrize("size", [{"batch_size": 2}, {"max_tokens": 24}])
def test_global_batch_builds_each_epochs_batches_once(
    tmp_path: Path, size: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resuming in epoch 6, then stepping to the end of epoch 11, builds each epoch's
    batches once (not every earlier epoch at every step), and finds the right batch."""
    train = tmp_path / "train.txt"
    words = ["Paris B-LOC", "went O", "Peter B-PER", "home O", "late O"]
    train.write_text("\n".join("\n".join(words[: n + 1]) + "\n" for n in range(5)))
    data = {"train": str(train), "val": str(train), "tokenizer": "wordpiece", "vocab_size": 40}
    task = build_task(recipe("tagging", data=data, train=size))
    task.prepare()
    examples = task.examples("train")
    epochs = [task.batches(examples, epoch, 1, True) for epoch in range(12)]
    expected = [batch for epoch in epochs for batch in epoch]
    built = []

    def batches(examples: list, epoch: int, parts: int, shuffle: bool) -> list[list[int]]:
        built.append(epoch)
        return epochs[epoch]

    monkeypatch.setattr(task, "batches", batches)
    resumed_at = sum(len(epoch) for epoch in epochs[:6]) + 1
    for index in range(resumed_at, len(expected)):
        wanted = task.collate([examples[i] for i in expected[index]]).targets
        assert torch.equal(task.global_batch(index, 1).targets, wanted), index
    assert built == list(range(12))


def test_evaluate_gives_the_model_its_mode_back_even_when_it_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train = tmp_path / "train.txt"
    train.write_text("Paris B-LOC\nwent O\n")
    data = {"train": str(train), "val": str(train), "tokenizer": "wordpiece", "vocab_size": 40}
    model_settings = {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32}
    task = build_task(recipe("tagging", data=data, model=model_settings))
    task.prepare()
    model = build_model(task.model_config()).train()
    assert "loss" in task.evaluate(model) and model.training

    def failing(model: torch.nn.Module, batch: object) -> torch.Tensor:
        assert not model.training
        raise RuntimeError("out of memory")

    monkeypatch.setattr(task, "logits", failing)
    with pytest.raises(RuntimeError, match="out of memory"):
        task.evaluate(model)
    assert model.training


def test_tagging_labels_first_subwords_and_checks_tags(tmp_path: Path) -> None:
    train, val = tmp_path / "train.txt", tmp_path / "val.txt"
    train.write_text("Peter B-PER\nBlackburnshire I-PER\nwent O\n\nParis B-LOC\n")
    val.write_text("Paris B-LOC\nrocks B-ROCK\n")
    data = {"train": str(train), "val": str(val), "tokenizer": "wordpiece", "vocab_size": 40}
    task = build_task(recipe("tagging", data=data))
    task.prepare()
    assert task.labels() == ["B-LOC", "B-PER", "I-PER", "O"]
    ids, targets = task.examples("train")[0]
    words = [t for t in targets if t != IGNORE_INDEX]
    assert [task.labels()[t] for t in words] == ["B-PER", "I-PER", "O"]
    assert len(ids) == len(targets) > 3  # a long word became several pieces
    with pytest.raises(DataError, match=rf"^{val}:2: tag 'B-ROCK' is not one of"):
        task.examples("val")


def test_token_dropout_hides_only_real_tokens_of_training_batches(tmp_path: Path) -> None:
    train = tmp_path / "train.txt"
    sentences = [f"w{i} O\nx{i} B-LOC\ny{i} O\nz{i} O\n" for i in range(64)]
    train.write_text("\n".join(sentences))
    data = {"train": str(train), "val": str(train), "tokenizer": "wordpiece", "vocab_size": 300}
    settings = {"batch_size": 64, "token_dropout": 0.3, "seed": 5}
    task = build_task(recipe("tagging", data=data, train=settings))
    task.prepare()
    plain = build_task(recipe("tagging", data=data, train={**settings, "token_dropout": 0.0}))
    plain.prepare()
    batch, clean = task.global_batch(0, 1), plain.global_batch(0, 1)
    unk, specials = task.tokenizer().unk_id, list(task.tokenizer().special_ids)
    ids, clean_ids = batch.inputs["input_ids"], clean.inputs["input_ids"]
    dropped = ids.ne(clean_ids)
    assert ids[dropped].eq(unk).all()
    assert not dropped[torch.isin(clean_ids, torch.tensor(specials))].any()
    real = clean.inputs["attention_mask"].sum().item()
    assert 0.2 < dropped.sum().item() / real < 0.4  # about 30% of the real tokens
    assert torch.equal(batch.targets, clean.targets)
    assert torch.equal(task.global_batch(0, 1).inputs["input_ids"], ids)  # a function of the step
    evaluated, clean_evaluated = next(task.eval_batches("val")), next(plain.eval_batches("val"))
    assert torch.equal(evaluated.inputs["input_ids"], clean_evaluated.inputs["input_ids"])
    with pytest.raises(ValueError, match=r"token_dropout=0.1: only encoder tasks"):
        build_task(recipe("lm", train={"token_dropout": 0.1}))


def test_rdrop_adds_the_symmetric_kl_of_two_dropout_draws(tmp_path: Path) -> None:
    """R-Drop's loss, against one written from the paper with ``F.kl_div``: the batch twice
    in one forward pass (two dropout draws), the mean cross-entropy over the targets that
    count, plus alpha / 4 times KL(p1 || p2) + KL(p2 || p1) averaged over those targets."""
    train = tmp_path / "train.txt"
    train.write_text("Peter B-PER\nBlackburnshire I-PER\nwent O\n\nParis B-LOC\nrocks O\n")
    data = {"train": str(train), "val": str(train), "tokenizer": "wordpiece", "vocab_size": 40}
    model_settings = {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "dropout": 0.3}
    settings = {"batch_size": 2, "rdrop": 0.7}
    task = build_task(recipe("tagging", data=data, model=model_settings, train=settings))
    task.prepare()
    model = build_model(task.model_config()).train()
    batch = task.global_batch(0, 1)
    torch.manual_seed(0)
    loss = task.loss(model, batch)

    torch.manual_seed(0)
    doubled = {k: torch.cat([v, v]) for k, v in batch.inputs.items()}
    first, second = model(**doubled).logits.chunk(2)
    counted = batch.targets != IGNORE_INDEX
    first, second, targets = first[counted], second[counted], batch.targets[counted]
    cross_entropy = (F.cross_entropy(first, targets) + F.cross_entropy(second, targets)) / 2
    log_p, log_q = first.log_softmax(-1), second.log_softmax(-1)
    kl = F.kl_div(log_q, log_p, log_target=True, reduction="batchmean") + F.kl_div(
        log_p, log_q, log_target=True, reduction="batchmean"
    )
    assert kl > 0.01  # the two draws differ
    torch.testing.assert_close(loss, cross_entropy + 0.7 * kl / 4, atol=1e-6, rtol=0)

    model.eval()  # no dropout, no second pass: the plain cross-entropy
    plain = F.cross_entropy(model(**batch.inputs).logits[counted], targets)
    torch.testing.assert_close(task.loss(model, batch), plain, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"rdrop=0.5: R-Drop compares predicted class"):
        build_task(recipe("regression", data={"dataset": "stsb"}, train={"rdrop": 0.5}))


def test_translation_shifts_targets_and_masks_padding(tmp_path: Path) -> None:
    source, target = tmp_path / "src.txt", tmp_path / "tgt.txt"
    source.write_text("ein Haus\nzwei kleine Katzen\n")
    target.write_text("a house\ntwo small cats\n")
    data = {"train": [str(source), str(target)], "tokenizer": "char", "vocab_size": 40}
    task = build_task(recipe("translation", data=data, train={"batch_size": 2}))
    task.prepare()
    tokenizer = task.target_tokenizer()
    batch = task.collate(task.examples("train"))
    tgt_in, targets, mask = batch.inputs["tgt_ids"], batch.targets, batch.inputs["tgt_mask"]
    assert tgt_in[:, 0].eq(tokenizer.bos_id).all()
    assert torch.equal(tgt_in[:, 1:][mask[:, 1:]], targets[:, :-1][mask[:, 1:]])
    assert (targets == IGNORE_INDEX).sum() == (~mask).sum()
    lengths = mask.sum(1)
    assert targets[torch.arange(2), lengths - 1].eq(tokenizer.eos_id).all()
    with pytest.raises(ValueError, match=r"data\.val must list two files"):
        build_task(recipe("translation", data={"val": "one.txt"})).read("val")


def test_a_translation_decoder_may_start_from_pad_and_sources_may_carry_a_prefix(
    tmp_path: Path,
) -> None:
    """T5's layout: no bos token, the decoder starting from pad; its task prefix before
    every source, in training and in translation."""
    source, target = tmp_path / "src.txt", tmp_path / "tgt.txt"
    source.write_text("ein Haus\nzwei kleine Katzen\n")
    target.write_text("a house\ntwo small cats\n")
    files = [str(source), str(target)]
    data = {
        "train": files,
        "tokenizer": "char",
        "vocab_size": 40,
        "translation": {"source_prefix": "de: "},
    }
    sizes = {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 16, "decoder_start": "pad"}
    task = build_task(recipe("translation", model=sizes, data=data))
    task.prepare()
    tokenizer = task.target_tokenizer()
    assert tokenizer.bos_id is None and task.start_id() == tokenizer.pad_id == 0
    batch = task.collate(task.examples("train"))
    assert batch.inputs["tgt_ids"][:, 0].eq(tokenizer.pad_id).all()
    (first, _), _ = task.examples("train")
    assert first == tokenizer.encode("de: ein Haus", add_eos=True)
    task.recipe.model = task.model_config()
    model = build_model(task.recipe.model).eval()
    expected = greedy_decode(model, torch.tensor([first]), bos_id=0, eos_id=tokenizer.eos_id)
    assert task.translate(model, ["ein Haus"], beam_size=1) == [tokenizer.decode(expected[0])]
    lines = ["ein Haus", "zwei kleine Katzen", "ein Haus"]
    for beam in (1, 2):  # batches after the first start from the same token
        whole = task.translate(model, lines, beam_size=beam)
        assert task.translate(model, lines, beam_size=beam, batch_size=1) == whole
    with pytest.raises(ValueError, match=r"model\.decoder_start='bos', but the tokenizer has no"):
        task.recipe.model.decoder_start = "bos"
        task.translate(model, ["ein Haus"])


def test_synthetic_validation_is_held_out_and_reversal_is_right() -> None:
    data = {
        "dataset": "reverse",
        "tokenizer": "char",
        "vocab_size": 20,
        "synthetic": {"train_size": 300, "val_size": 100, "min_digits": 2, "max_digits": 3},
    }
    task = build_task(recipe("synthetic", data=data))
    train, val = task.read("train"), task.read("val")
    assert all(target == source[::-1] for source, target in train)
    assert not {s for s, _ in val} & {s for s, _ in train}


def test_language_model_blocks_predict_the_next_token(tmp_path: Path) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("to be or not to be\n" * 50)
    data = {"train": str(text), "val": str(text), "tokenizer": "char", "lm": {"block_size": 8}}
    task = build_task(recipe("lm", data=data, train={"batch_size": 3}))
    task.prepare()
    batch = task.global_batch(5, 2)
    x, y = batch.inputs["input_ids"], batch.targets
    assert x.shape == y.shape == (6, 8)
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal(task.global_batch(5, 2).targets, y), "batches are a function of the index"
    with pytest.raises(ValueError, match=r"set data\.dataset = .tinyshakespeare. or data\.test"):
        task.lines("test")


class UniformLM(torch.nn.Module):
    """A language model that gives every token of a ``vocab`` the same probability."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab

    def forward(self, input_ids: torch.Tensor) -> SimpleNamespace:
        return SimpleNamespace(logits=torch.zeros(*input_ids.shape, self.vocab))


def test_language_model_bits_per_byte_counts_the_bytes_of_the_scored_text(
    tmp_path: Path,
) -> None:
    """Uniform predictions cost ``log2(vocab)`` bits a target; the targets are every token
    but the first, so their text is the file's without its first token: here "naïve"'s
    "ï" and "—" are two and three bytes, split by byte-level BPE across tokens and blocks."""
    line = "naïve café — Grüße\n"
    text = tmp_path / "corpus.txt"
    text.write_text(line * 20, encoding="utf-8")
    data = {"train": str(text), "val": str(text), "vocab_size": 300, "lm": {"block_size": 7}}
    task = build_task(recipe("lm", data=data, train={"batch_size": 2}))
    task.prepare()
    tokenizer = task.tokenizer()
    ids = tokenizer.encode(line * 20)
    first = tokenizer.decode(ids[:1])
    assert (line * 20).startswith(first)
    metrics = task.evaluate(UniformLM(tokenizer.vocab_size))
    bits = (len(ids) - 1) * math.log2(tokenizer.vocab_size)
    scored_bytes = len((line * 20).encode()) - len(first.encode())
    assert metrics["bits_per_byte"] == pytest.approx(bits / scored_bytes, rel=1e-6)


def test_a_language_model_of_a_corpus_ends_each_document_with_eos() -> None:
    data = {"vocab_size": 300, "pretraining": {"corpus": ["stsb"]}}
    task = build_task(recipe("lm", data=data))
    task.prepare()
    tokenizer = task.tokenizer()
    documents = list(corpus_documents(["stsb"], []))
    for split, held_out in (("train", False), ("val", True)):
        expected = list(split_held_out(documents, held_out))
        ids = task.stream(split).ids.tolist()
        ends = [i for i, token in enumerate(ids) if token == tokenizer.eos_id]
        assert len(ends) == len(expected) and ends[-1] == len(ids) - 1
        assert tokenizer.decode(ids[: ends[0]]) == expected[0]
        assert tokenizer.decode(ids[ends[-2] + 1 : ends[-1]]) == expected[-1]


def test_language_model_streams_are_memory_mapped_token_files(tmp_path: Path) -> None:
    text = tmp_path / "corpus.txt.gz"
    with gzip.open(text, "wt", encoding="utf-8") as f:
        f.write("line one\r\nline two\r\n" * 30_000)  # more lines than one encoding chunk
    data = {"train": str(text), "tokenizer": "char"}
    task = build_task(recipe("lm", data=data))
    task.prepare()
    stream = task.stream("train")
    assert isinstance(stream.ids, np.memmap)
    assert task.tokenizer().decode(stream.ids[:18].tolist()) == "line one\nline two\n"
    assert len(stream) == 30_000 * len("line one\nline two\n")
    folder = Path(stream.ids.filename).parent
    del task, stream
    gc.collect()
    assert not folder.exists(), "token files are removed with the task"


SMALL_MODEL = {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32}


def test_sentence_tasks_predict_one_line_of_text_a_line(tmp_path: Path) -> None:
    data = pair_data(tmp_path, tokenizer="wordpiece", vocab_size=40)
    lines = ["a man plays\tthe dog", "the cat\tthe cat"]
    for name, pattern in [
        ("classification", r"(1\.0|4\.0)\t[01]\.\d{4}"),
        ("regression", r"-?\d+\.\d{4}"),
        ("similarity", r"-?[01]\.\d{4}"),
    ]:
        task = build_task(recipe(name, data=data, model=SMALL_MODEL))
        task.prepare()
        model = build_model(task.model_config()).eval()
        predicted = task.predict_lines(model, lines)
        assert len(predicted) == 2 and all(re.fullmatch(pattern, p) for p in predicted), name
        if name != "classification":
            values = [record.value for record in task.predict(model, lines)]
            assert predicted == [f"{value:.4f}" for value in values]
        with pytest.raises(ValueError, match="this model reads sentence pairs"):
            task.predict_lines(model, ["one sentence"])


@pytest.mark.parametrize("name", ["classification", "regression", "similarity"])
def test_sentence_tasks_warn_of_cut_lines(name: str, tmp_path: Path) -> None:
    data = pair_data(tmp_path, tokenizer="char", max_len=14)
    task = build_task(recipe(name, data=data))
    task.prepare()
    model = build_model(task.model_config()).eval()
    fits = "a man\tthe dog"  # [CLS] 5 [SEP] 7 [SEP]: 15 tokens as one input, 9 alone
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if name == "similarity":  # a bi-encoder reads each sentence alone
            task.predict_lines(model, [fits])
        else:
            with pytest.warns(UserWarning, match=r"1 line\(s\) longer than 14 tokens .*line 1\)"):
                task.predict_lines(model, [fits])
        task.predict_lines(model, ["a man\tthe"])
    with pytest.warns(UserWarning, match=r"1 line\(s\) longer than 14 tokens were cut \(line 2\)"):
        task.predict_lines(model, ["a\tb", "a man plays well\tthe"])


def test_the_tagger_predicts_conll_lines_and_warns_of_cut_sentences(tmp_path: Path) -> None:
    data = tmp_path / "train.txt"
    data.write_text("Peter B-PER\nwent O\n\nParis B-LOC\n")
    settings = {"train": str(data), "tokenizer": "char", "max_len": 12}
    task = build_task(recipe("tagging", data=settings, model=SMALL_MODEL))
    task.prepare()
    model = build_model(task.model_config()).eval()
    tagged = task.predict_lines(model, ["Peter  went", ""])
    assert tagged[1] == ""
    assert [line.split(" ")[0] for line in tagged[0].splitlines(keepends=True)] == [
        "Peter",
        "went",
    ]
    assert all(line.split(" ")[1] in task.labels() for line in tagged[0].splitlines())
    with pytest.warns(UserWarning, match="1 sentence.s. longer than 12 sub-words: their last"):
        tagged = task.predict_lines(model, ["Peter went to Paris today"])
    assert tagged[0].endswith("\ntoday O\n") and tagged[0].count("\n") == 5


def test_tasks_without_line_predictions_or_decoding_say_so(tmp_path: Path) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("to be or not to be\n")
    task = build_task(recipe("lm", data={"train": str(text), "tokenizer": "char"}))
    task.prepare()
    model = build_model(task.model_config()).eval()
    with pytest.raises(ValueError, match="lm models do not predict line by line"):
        task.predict_lines(model, ["to be"])
    assert task.decoding_metrics(model) == {}


def test_value_tasks_read_scores_and_report_correlations(tmp_path: Path) -> None:
    rows = PAIRS + "big\tsmall\t0.5\n"
    data = pair_data(tmp_path, rows, tokenizer="wordpiece", vocab_size=40)
    regression = build_task(recipe("regression", data=data, model=SMALL_MODEL))
    regression.prepare()
    batch = regression.collate(regression.examples("train"))
    assert batch.targets.tolist() == [4.0, 1.0, 0.5] and batch.targets.dtype == torch.float32
    assert batch.inputs["token_type_ids"].amax() == 1, "both sentences in one input"
    model = build_model(regression.model_config())
    metrics = regression.evaluate(model)
    assert metrics.keys() == {"mse", "pearson", "spearman"}
    [predicted] = regression.predict(model, ["a man plays\ta man sings"])
    assert metrics["mse"] >= 0 and isinstance(predicted.value, float)
    similarity = build_task(recipe("similarity", data=data, model=SMALL_MODEL))
    similarity.prepare()
    assert similarity.collate(similarity.examples("train")).targets.dtype == torch.float32
    assert similarity.evaluate(build_model(similarity.model_config())).keys() == {
        "pearson",
        "spearman",
    }
    with pytest.raises(ValueError, match="R-Drop compares predicted class distributions, and si"):
        build_task(recipe("similarity", data=data, train={"rdrop": 0.1}))
    for setting in ("mark_shared_words", "symmetric_pairs"):  # a pair read as one input
        with pytest.raises(ValueError, match=r"\[data.pairs\] is read by .* not by similarity"):
            build_task(recipe("similarity", data={**data, "pairs": {setting: True}}))


@pytest.mark.parametrize("name", ["classification", "regression"])
def test_a_cross_encoder_marks_the_words_a_pair_shares(name: str, tmp_path: Path) -> None:
    """With ``data.pairs.mark_shared_words``, every token whose word the other sentence has too
    (case ignored) is segment 2, in training batches and in predictions alike; cut pairs
    keep the marks of the tokens kept."""
    rows = "A man plays\ta MAN sings\t4.0\nthe cat\tthe dog\t1.0\n"
    data = pair_data(tmp_path, rows, tokenizer="wordpiece", vocab_size=200)  # words whole
    plain = build_task(recipe(name, data=data, model=SMALL_MODEL))
    plain.prepare()
    task = build_task(
        recipe(name, data={**data, "pairs": {"mark_shared_words": True}}, model=SMALL_MODEL)
    )
    task.prepare()
    assert (plain.model_config().type_vocab_size, task.model_config().type_vocab_size) == (2, 3)
    tokenizer = task.tokenizer()

    def marked(texts: tuple[str, str], max_len: int = 128) -> list[tuple[str, int]]:
        task.data.max_len = max_len
        [example] = task.encode_inputs([texts], [0])
        return list(zip(tokenizer.tokens(example.ids), example.segments, strict=True))

    tokens = marked(("A man plays", "a MAN sings"))
    assert [t for t, _ in tokens] == [
        "[CLS]",
        "A",
        "man",
        "plays",
        "[SEP]",
        "a",
        "MAN",
        "sings",
        "[SEP]",
    ]
    assert [s for _, s in tokens] == [0, 2, 2, 0, 0, 2, 2, 1, 1]
    batch = task.collate(task.examples("train"))
    assert batch.inputs["token_type_ids"].amax() == 2
    plain_batch = plain.collate(plain.examples("train"))
    assert plain_batch.inputs["token_type_ids"].amax() == 1
    assert torch.equal(batch.inputs["input_ids"], plain_batch.inputs["input_ids"])
    model = build_model(task.model_config()).eval()
    assert len(task.predict_lines(model, ["a man plays\tthe man"])) == 1
    assert [s for _, s in marked(("the cat", "the dog"), max_len=6)] == [0, 2, 0, 2, 1, 1]


def test_symmetric_pairs_predict_the_mean_of_both_orders(tmp_path: Path) -> None:
    data = pair_data(
        tmp_path, tokenizer="wordpiece", vocab_size=60, pairs={"mark_shared_words": True}
    )
    one_way = build_task(recipe("regression", data=data, model=SMALL_MODEL))
    one_way.prepare()
    both = build_task(
        recipe(
            "regression",
            data={**data, "pairs": {**data["pairs"], "symmetric_pairs": True}},
            model=SMALL_MODEL,
        )
    )
    both.prepare()
    torch.manual_seed(0)
    model = build_model(both.model_config()).eval()
    lines = ["a man plays\tthe man", "the man\ta man plays"]
    ab, ba = (record.value for record in one_way.predict(model, lines))
    assert abs(ab - ba) > 1e-4, "one input reads the order"
    symmetric = [record.value for record in both.predict(model, lines)]
    assert symmetric == pytest.approx([(ab + ba) / 2] * 2, abs=1e-5)
    batch = both.global_batch(0, 1)
    assert batch.inputs["input_ids"].shape[:2] == (2, 2) and batch.targets.shape == (2,)
    first = batch.slice(0, 2)
    assert first.inputs["token_type_ids"].shape[:2] == (1, 2)
    model.train()
    both.loss(model, batch).backward()
    assert both.evaluate(model).keys() == {"mse", "pearson", "spearman"}
    inputs, _ = both.attention_inputs("a man plays\tthe man")
    assert inputs["input_ids"].dim() == 2, "attention pictures read the order given"
