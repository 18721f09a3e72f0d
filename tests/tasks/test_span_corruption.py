"""Span-corruption pretraining: its batches, exact resume, and translation fine-tunes that
start from it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import RECIPES, interrupted_after, pretrain_t5, run, tiny_t5, translation_fine_tune
from scratchformer.cli import main
from scratchformer.config import Recipe
from scratchformer.data.noise import corrupted_lengths
from scratchformer.inference import greedy_decode
from scratchformer.run import load_run
from scratchformer.tasks import build_task
from scratchformer.tasks.span_corruption import SpanCorruptionTask, split_spans


@pytest.fixture(scope="module")
def pretrained(t5_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny span-corruption run of 8 steps: the unbroken run that a resumed one must
    equal, and the start of the fine-tunes."""
    run_dir = tmp_path_factory.mktemp("span-corruption") / "run"
    assert pretrain_t5(run_dir, t5_corpus, "train.max_steps=8") == 0
    return run_dir


def prepared(t5_corpus: Path) -> SpanCorruptionTask:
    task = build_task(Recipe.load(RECIPES / "pretrain-t5.toml", tiny_t5(t5_corpus)))
    task.prepare()
    return task


def uncorrupt(inputs: list[int], targets: list[int], sentinels: list[int]) -> list[int]:
    """The text back: each sentinel of the inputs replaced by what follows it in the targets."""
    spans: dict[int, list[int]] = {}
    for token in targets:
        if token in sentinels:
            span = spans[token] = []
        else:
            span.append(token)
    return [t for token in inputs for t in (spans[token] if token in sentinels else [token])]


def test_batches_hide_spans_behind_sentinels_of_windows_of_the_corpus(t5_corpus: Path) -> None:
    task = prepared(t5_corpus)
    tokenizer = task.tokenizer()
    assert len(tokenizer.sentinel_ids) == 8 and tokenizer.bos_id is not None
    assert task.model_config().tgt_vocab_size == task.model_config().vocab_size
    stream = task.stream("train").ids.tolist()
    batch = task.global_batch(3, 2)
    src, tgt, targets = batch.inputs["src_ids"], batch.inputs["tgt_ids"], batch.targets
    inputs_length, targets_length = corrupted_lengths(task.window, 0.15, 3.0)
    assert src.shape == (8, inputs_length) and inputs_length <= 40
    assert tgt.shape == targets.shape == (8, targets_length)
    assert batch.inputs["src_mask"].all() and batch.inputs["tgt_mask"].all()  # no padding
    assert (tgt[:, 0] == tokenizer.bos_id).all() and torch.equal(tgt[:, 1:], targets[:, :-1])
    assert (src[:, -1] == tokenizer.eos_id).all() and (targets[:, -1] == tokenizer.eos_id).all()
    for inputs, outputs in zip(src.tolist(), targets.tolist(), strict=True):
        assert outputs[0] == tokenizer.sentinel_ids[0]
        window = uncorrupt(inputs[:-1], outputs[:-1], tokenizer.sentinel_ids)
        assert len(window) == task.window
        starts = [i for i in range(len(stream)) if stream[i : i + len(window)] == window]
        assert starts, "the text is a window of the t5_corpus"
    again = task.global_batch(3, 2)
    assert torch.equal(again.inputs["src_ids"], src) and torch.equal(again.targets, targets)
    assert not torch.equal(task.global_batch(4, 2).inputs["src_ids"], src)
    first, second = list(task.eval_batches("val")), list(task.eval_batches("val"))
    assert first and all(
        torch.equal(a.targets, b.targets) for a, b in zip(first, second, strict=True)
    )


def test_too_few_sentinels_for_the_spans_is_an_error(t5_corpus: Path) -> None:
    with pytest.raises(ValueError, match=r"sentinels=1 is fewer than the 2 spans"):
        build_task(
            Recipe.load(
                RECIPES / "pretrain-t5.toml",
                [*tiny_t5(t5_corpus), "data.span_corruption.sentinels=1"],
            )
        )


def test_resume_is_bit_identical_mid_pretraining(
    tmp_path: Path, t5_corpus: Path, pretrained: Path
) -> None:
    with interrupted_after(4):
        assert pretrain_t5(tmp_path / "halves", t5_corpus, "train.max_steps=8") == 130
    recipe = str(RECIPES / "pretrain-t5.toml")
    assert main(["--quiet", "train", recipe, "--out", str(tmp_path / "halves"), "--resume"]) == 0
    straight, halves = (
        load_file(run / "model.safetensors") for run in (pretrained, tmp_path / "halves")
    )
    assert straight.keys() == halves.keys()
    assert all(torch.equal(straight[k], halves[k]) for k in straight)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_translation_fine_tunes_from_a_span_corruption_run(
    tmp_path: Path, pretrained: Path, lora: bool
) -> None:
    run = tmp_path / "run"
    lora_rank = ["train.lora_rank=2"] if lora else []
    assert translation_fine_tune(pretrained, run, "train.lr=1e-9", *lora_rank) == 0
    assert (run / "tokenizer.json").read_text() == (pretrained / "tokenizer.json").read_text()
    config = json.loads((run / "config.json").read_text())["model"]
    pretrained_config = json.loads((pretrained / "config.json").read_text())["model"]
    for field in ("d_model", "vocab_size", "tgt_vocab_size", "share_embeddings", "n_layers"):
        assert config[field] == pretrained_config[field], field
    if lora:  # the run keeps its adapters only; the frozen base is in the pretrained run
        assert all(".lora_" in name for name in load_file(run / "model.safetensors"))
    (_, start), (task, tuned) = load_run(pretrained), load_run(run)
    ids = torch.randint(tuned.config.vocab_size, (2, 9))
    difference = (start(ids, ids).logits - tuned(ids, ids).logits).abs().max()
    assert difference < 1e-4, "lr 1e-9: the pretrained model still"
    assert len(task.translate(tuned, ["a man runs"], beam_size=2)) == 1


def test_spans_are_the_tokens_after_each_sentinel() -> None:
    assert split_spans([7, 1, 5, 6, 2, 1, 8], {1, 2}) == {1: [8], 2: []}
    assert split_spans([5, 2, 6, 6], {1, 2}) == {2: [6, 6]}


def test_fill_spans_prints_the_greedy_span_of_each_sentinel(
    span_run: Path, capsys, monkeypatch
) -> None:
    lines = ["the man<extra_id_0> in the park", "a dog <extra_id_1> on<extra_id_0> red"]
    status, out, err = run(capsys, monkeypatch, "\n".join(lines), "fill-spans", str(span_run))
    assert status == 0, err
    task, model = load_run(span_run)
    tokenizer = task.tokenizer()
    s0, s1 = tokenizer.sentinel_ids[:2]
    second = task.encode_input(lines[1])
    pieces = [*tokenizer.encode("a dog "), s1, *tokenizer.encode(" on"), s0]
    assert second == [*pieces, *tokenizer.encode(" red"), tokenizer.eos_id]
    (output,) = greedy_decode(
        model, torch.tensor([second]), bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id
    )
    spans = split_spans(output, {s0, s1})
    fills = [tokenizer.decode(spans.get(s, [])) for s in (s1, s0)]
    assert len(out) == 2 and out[1].split("\t") == fills and out[0].count("\t") == 0
    for text, message in [
        ("a<extra_id_0>\nno sentinel", "standard input, line 2: no <extra_id_0> in 'no sentinel'"),
        ("<extra_id_8>", "8 sentinels"),
    ]:
        status, _, err = run(capsys, monkeypatch, text, "fill-spans", str(span_run))
        assert status == 2 and message in err and len(err.splitlines()) == 1


def test_attention_of_a_span_corruption_run(span_run: Path, tmp_path, capsys, monkeypatch):
    """The text with its sentinel is the encoder's input; the decoder reads the model's own
    fill (or ``--target``) from its start token."""
    text, png, page = "the man<extra_id_0> in the park", tmp_path / "a.png", tmp_path / "a.html"
    status, lines, err = run(
        capsys, monkeypatch, "", "attention", str(span_run), text, "--out", str(png)
    )
    assert status == 0, err
    task, _ = load_run(span_run)
    keys = len(task.encode_input(text))
    assert re.fullmatch(rf"{png}: cross attention, \d+ query x {keys} key tokens", lines[0])
    target = ["--target", "<extra_id_0> sits", "--kind", "decoder", "--layer", "0", "--head", "1"]
    status, lines, err = run(
        capsys, monkeypatch, "", "attention", str(span_run), text, *target, "--out", str(page)
    )
    assert status == 0, err
    data = re.search(r'id="attention-data">(.*?)</script>', page.read_text())
    shown = json.loads(data.group(1))
    assert {"encoder", "decoder", "cross"} <= set(shown["attention"])
    assert "<extra_id_0>" in json.dumps(shown)
