"""Masked-LM pretraining: the head's loss, batches and evaluation, resuming, fill-mask, and
fine-tunes that start from a pretraining run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from helpers import RECIPES, TINY_SIZES, interrupted_after, set_options, tiny_config
from scratchformer import build_model
from scratchformer.cli import main
from scratchformer.config import Recipe
from scratchformer.data.tokenizer import Tokenizer
from scratchformer.nn.loss import IGNORE_INDEX
from scratchformer.run import load_run


def test_the_head_is_tied_and_its_loss_is_cross_entropy_at_the_masked_positions() -> None:
    torch.manual_seed(0)
    model = build_model(tiny_config(arch="encoder", head="mlm")).eval()
    assert model.head.weight is model.embedding.tokens.weight
    ids = torch.randint(5, 29, (3, 10))
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, [2, 7]] = ids[:, [2, 7]]
    logits = model(ids).logits
    expected = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
    loss = model(ids, labels=labels).loss
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"labels are for the pretraining heads \(mlm, rtd\)"):
        build_model(tiny_config(arch="encoder", head="classification"))(ids, labels=labels)


def test_evaluation_masks_the_held_out_text_the_same_way_every_time(mlm_run: Path) -> None:
    task, model = load_run(mlm_run)
    first, again = task.evaluate(model), task.evaluate(model)
    assert first == again and 0.0 <= first["accuracy"] <= 1.0
    batch = next(task.eval_batches("val"))
    ids = batch.inputs["input_ids"]
    tokenizer = task.tokenizer()
    assert (ids[:, 0] == tokenizer.cls_id).all() and (ids[:, -1] == tokenizer.sep_id).all()
    assert (batch.targets != IGNORE_INDEX).any()


def test_span_masking_chooses_neighbours_together(mlm_run: Path) -> None:
    task, _ = load_run(mlm_run)

    def neighbours_chosen() -> float:
        """Of the chosen tokens, the share whose left neighbour is chosen too."""
        chosen = torch.cat([task.global_batch(i, 1).targets != IGNORE_INDEX for i in range(40)])
        return ((chosen[:, 1:] & chosen[:, :-1]).sum() / chosen.sum()).item()

    words = neighbours_chosen()
    task.data.mlm.mask_span_length = 4.0
    assert neighbours_chosen() > words + 0.4


PRETRAINING_RUNS = ["mlm_run", "rtd_run"]
"""The fixtures of the encoder pretraining runs: masked LM's and ELECTRA's."""


@pytest.mark.parametrize("pretraining", PRETRAINING_RUNS)
def test_resuming_mid_pretraining_gives_the_weights_of_an_unbroken_run(
    tmp_path: Path, pretraining: str, request: pytest.FixtureRequest
) -> None:
    """The run's recipe trained again, stopped after its step 3 and resumed."""
    run: Path = request.getfixturevalue(pretraining)
    args = ["--quiet", "train", str(run / "config.json"), "--out", str(tmp_path / "halves")]
    with interrupted_after(3):
        assert main(args) == 130
    assert main([*args, "--resume"]) == 0
    last = Path("checkpoints") / "step-00000006" / "model.safetensors"
    straight, halves = load_file(run / last), load_file(tmp_path / "halves" / last)
    assert straight.keys() == halves.keys()
    assert all(torch.equal(straight[k], halves[k]) for k in straight)


def test_fill_mask_gives_the_likeliest_tokens_with_their_probabilities(mlm_run: Path) -> None:
    task, model = load_run(mlm_run)
    (line,) = task.predict_lines(model, ["the cat [MASK] on a [MASK]"], top_k=3)
    masks = line.split(" | ")
    assert len(masks) == 2
    for mask in masks:
        candidates = [c.rsplit(" ", 1) for c in mask.split("\t")]
        probabilities = [float(p) for _, p in candidates]
        assert len(candidates) == 3 and probabilities == sorted(probabilities, reverse=True)
        assert sum(probabilities) <= 1.0 + 1e-3
    with pytest.raises(ValueError, match=r"no \[MASK\]"):
        task.predict_lines(model, ["nothing to fill"])


@pytest.mark.parametrize(
    ("pretraining", "settings"),
    [
        ("mlm_run", ()),
        ("mlm_run", ("train.lora_rank=2",)),
        ("mlm_run", ("data.lowercase=true",)),
        ("rtd_run", ()),
    ],
    ids=["mlm", "mlm-lora", "mlm-lowercase", "rtd"],
)
def test_a_fine_tune_starts_from_a_pretraining_run(
    tmp_path: Path, pretraining: str, settings: tuple[str, ...], request: pytest.FixtureRequest
) -> None:
    """It takes the run's tokenizer (lower-casing first with ``data.lowercase``) and
    encoder, and leaves its pretraining head (with ELECTRA's generator)."""
    run: Path = request.getfixturevalue(pretraining)
    data = tmp_path / "data.tsv"
    data.write_text("text\tlabel\n" + "the cat sat\tpos\ndogs ran\tneg\n" * 8)
    run_dir = tmp_path / "fine-tune"
    options = [
        f"train.init_from='{run}'",
        "data.dataset=none",
        f"data.train='{data}'",
        f"data.val='{data}'",
        "data.text_columns=['text']",
        "data.label_column='label'",
        "data.max_len=32",
        "train.max_steps=2",
        "train.eval_every=2",
        "train.batch_size=4",
        "train.lr=1e-9",
        "data.lowercase=false",  # sst2.toml's data.lowercase, unless the case sets it
        *settings,
    ]
    args = ["--quiet", "train", str(RECIPES / "sst2.toml"), "--out", str(run_dir)]
    assert main([*args, *set_options(options)]) == 0
    start_tokenizer = Tokenizer.load(run / "tokenizer.json")
    lowercase = "data.lowercase=true" in settings
    expected = start_tokenizer.lowercased() if lowercase else start_tokenizer
    assert (run_dir / "tokenizer.json").read_text() == expected.to_json()
    text = "The Cat SAT"
    read = text.lower() if lowercase else text
    assert Tokenizer.load(run_dir / "tokenizer.json").encode(text) == start_tokenizer.encode(read)
    assert start_tokenizer.encode(text) != start_tokenizer.encode(text.lower())
    recipe = Recipe.load(run_dir / "config.json")
    assert recipe.model.head == "classification" and recipe.model.d_model == TINY_SIZES["d_model"]
    _, start = load_run(run)
    _, tuned = load_run(run_dir)
    tuned_state, start_state = dict(tuned.named_parameters()), dict(start.named_parameters())
    for name in ("embedding.tokens.weight", "encoder.layers.0.feed_forward.w1.weight"):
        torch.testing.assert_close(tuned_state[name], start_state[name], atol=1e-6, rtol=0)
    assert {k for k in tuned_state if k.startswith("head.")} == {
        "head.proj.weight",
        "head.proj.bias",
    }
    info = json.loads((run_dir / "config.json").read_text())
    assert info["train"]["init_from"] == str(run)


def test_a_fine_tune_longer_than_the_learnt_positions_is_refused(
    tmp_path: Path, mlm_run: Path, capsys
) -> None:
    args = ["train", str(RECIPES / "sst2.toml"), "--out", str(tmp_path / "run")]
    settings = [f"train.init_from='{mlm_run}'", "data.max_len=65"]
    assert main([*args, *set_options(settings)]) == 2
    assert "data.max_len=65 is beyond the 64 positions" in capsys.readouterr().err
    assert not (tmp_path / "run" / "config.json").exists()
