"""Denoising pretraining: its batches (noised sentences in, whole sentences out), exact
resume, and a translation fine-tune that starts from it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import (
    RECIPES,
    interrupted_after,
    set_options,
    tiny_pretraining,
    translation_fine_tune,
)
from scratchformer.cli import main
from scratchformer.config import Recipe
from scratchformer.nn.loss import IGNORE_INDEX
from scratchformer.run import load_run
from scratchformer.tasks import build_task
from scratchformer.tasks.denoising import DenoisingTask
from scratchformer.training.initialisation import new_model

RECIPE = str(RECIPES / "pretrain-denoising.toml")


def tiny(corpus: Path, *extra: str) -> list[str]:
    """Settings that make pretrain-denoising.toml a tiny run on ``corpus``."""
    return [*tiny_pretraining(corpus), "train.eval_batches=2", *extra]


def pretrain(out: Path, corpus: Path, *extra: str) -> int:
    options = set_options(tiny(corpus, *extra))
    return main(["--quiet", "train", RECIPE, "--out", str(out), *options])


@pytest.fixture(scope="module")
def pretrained(t5_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny denoising run of 8 steps: the unbroken run that a resumed one must equal,
    and the start of a fine-tune."""
    run_dir = tmp_path_factory.mktemp("denoising") / "run"
    assert pretrain(run_dir, t5_corpus, "train.max_steps=8") == 0
    return run_dir


def prepared(corpus: Path) -> DenoisingTask:
    task = build_task(Recipe.load(RECIPE, tiny(corpus)))
    task.prepare()
    return task


def test_a_batch_noises_sentences_of_the_corpus_and_asks_for_them_whole(t5_corpus: Path) -> None:
    task = prepared(t5_corpus)
    tokenizer = task.tokenizer()
    (mask,) = tokenizer.sentinel_ids
    sentences = set(t5_corpus.read_text().splitlines())
    batch = task.global_batch(3, 2)
    assert batch.inputs["src_ids"].shape[0] == 8
    masked = 0
    for src, src_mask, tgt, targets in zip(
        batch.inputs["src_ids"],
        batch.inputs["src_mask"],
        batch.inputs["tgt_ids"],
        batch.targets,
        strict=True,
    ):
        whole = targets[targets != IGNORE_INDEX].tolist()
        assert whole[-1] == tokenizer.eos_id and tgt[0] == task.start_id()
        text = tokenizer.decode(whole[:-1])  # the label: the sentence, whole or its start
        cut = len(whole) == 40 and any(sentence.startswith(text) for sentence in sentences)
        assert text in sentences or cut
        assert torch.equal(tgt[1 : len(whole)], targets[: len(whole) - 1])  # teacher forcing
        noised = src[src_mask].tolist()
        assert noised[-1] == tokenizer.eos_id
        kept = [t for t in noised[:-1] if t != mask]
        assert len(whole) - 1 - len(kept) == round(0.35 * (len(whole) - 1))
        masked += noised.count(mask)
    assert masked > 0
    again = prepared(t5_corpus).global_batch(3, 2)  # a batch is a function of its index
    assert torch.equal(again.inputs["src_ids"], batch.inputs["src_ids"])
    assert not torch.equal(task.global_batch(4, 2).inputs["src_ids"], batch.inputs["src_ids"])


def test_evaluation_reads_the_held_out_sentences_with_the_same_noise_each_time(
    t5_corpus: Path,
) -> None:
    task = prepared(t5_corpus)
    first, again = (list(task.eval_batches("val")) for _ in range(2))
    assert len(first) == 1  # 3 of the 300 sentences are held out, one batch of 4
    assert torch.equal(first[0].inputs["src_ids"], again[0].inputs["src_ids"])
    assert first[0].inputs["src_ids"].shape[0] == 3


def test_resume_is_bit_identical_mid_pretraining(
    tmp_path: Path, t5_corpus: Path, pretrained: Path
) -> None:
    with interrupted_after(4):
        assert pretrain(tmp_path / "halves", t5_corpus, "train.max_steps=8") == 130
    assert main(["--quiet", "train", RECIPE, "--out", str(tmp_path / "halves"), "--resume"]) == 0
    straight, halves = (
        load_file(run / "model.safetensors") for run in (pretrained, tmp_path / "halves")
    )
    assert straight.keys() == halves.keys()
    assert all(torch.equal(straight[k], halves[k]) for k in straight)


def test_a_translation_fine_tune_starts_from_it(tmp_path: Path, pretrained: Path) -> None:
    run = tmp_path / "run"
    assert translation_fine_tune(pretrained, run, "model.norm_first=true") == 0
    assert (run / "tokenizer.json").read_text() == (pretrained / "tokenizer.json").read_text()


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_a_fine_tune_may_start_one_side_from_it(
    tmp_path: Path, pretrained: Path, side: str
) -> None:
    """``train.init_only`` copies the parts it names; the others keep the initial weights of
    the fine-tune's seed (lr 1e-9: two steps move no weight by 1e-6)."""
    run = tmp_path / "run"
    only = f"train.init_only=['{side}', 'src_embedding']"
    assert (
        translation_fine_tune(pretrained, run, "model.norm_first=true", "train.lr=1e-9", only) == 0
    )
    task, tuned = load_run(run)
    start, fresh = load_run(pretrained)[1].state_dict(), new_model(task.recipe).state_dict()
    weights_of = dict(tuned.named_parameters())  # a tied weight once, by its first name
    copied = 0
    for name, weights in weights_of.items():
        from_start = name.split(".")[0] in (side, "src_embedding")
        copied += from_start
        expected = start[name] if from_start else fresh[name]
        torch.testing.assert_close(weights, expected, rtol=0, atol=1e-6, msg=name)
    assert 0 < copied < len(weights_of)


def test_init_only_names_parts_the_model_has(tmp_path: Path, pretrained: Path, capsys) -> None:
    only = "train.init_only=['encoder', 'embeddings']"
    assert translation_fine_tune(pretrained, tmp_path / "run", only) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train.init_only" in err and "no part embeddings" in err
