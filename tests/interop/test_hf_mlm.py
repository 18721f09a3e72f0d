"""Masked language models in and out of Hugging Face: a ``BertForMaskedLM`` (tied or not)
imports as an encoder with the mlm head and as an mlm run that fills masks, and an mlm run
exports as one that ``transformers``' fill-mask pipeline reads, with the same logits and
the same likeliest tokens."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file

from helpers import run
from scratchformer import from_pretrained
from scratchformer.cli import main
from scratchformer.run import load_run

TEXTS = [
    "the cat [MASK] on the mat .",
    "a dog [MASK] under the old tree , and a [MASK] bird sang .",
    "[MASK] .",
]


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def tiny_mlm(
    request, tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, bool]:
    """A ``BertForMaskedLM`` of the tiny sizes with random weights, its decoder tied to the
    token embedding or not, and MiniLM's tokenizer."""
    tied = request.param
    torch.manual_seed(0)
    config = transformers.BertConfig.from_pretrained(tiny_bert, tie_word_embeddings=tied)
    model = transformers.BertForMaskedLM(config)
    with torch.no_grad():  # a head far from the defaults, so that differences show
        head = model.cls.predictions
        head.transform.LayerNorm.weight.uniform_(0.5, 1.5)
        head.transform.LayerNorm.bias.uniform_(-1, 1)
        head.bias.uniform_(-1, 1)
        if not tied:  # the decoder's own weight and bias (the head's bias is then unused)
            head.decoder.weight.normal_(std=0.5)
            head.decoder.bias.uniform_(-1, 1)
    directory = tmp_path_factory.mktemp("tiny-mlm")
    model.save_pretrained(directory)
    for path in tiny_bert.glob("*token*"):
        shutil.copy(path, directory / path.name)
    return directory, tied


def _inputs(checkpoint: Path) -> dict[str, torch.Tensor]:
    """``transformers``' own encoding of the texts, padded."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    return dict(tokenizer(TEXTS, padding=True, return_tensors="pt"))


def _assert_same_logits(ours: torch.nn.Module, checkpoint: Path) -> None:
    theirs = transformers.BertForMaskedLM.from_pretrained(checkpoint).eval()
    inputs = _inputs(checkpoint)
    with torch.no_grad():
        mine, reference = ours(**inputs).logits, theirs(**inputs).logits
    real = inputs["attention_mask"].bool()
    assert real.sum(1).unique().numel() == len(TEXTS)  # padded, of different lengths
    assert (mine - reference)[real].abs().max() <= 1e-4


def test_a_bert_for_masked_lm_imports_with_the_mlm_head(tiny_mlm) -> None:
    checkpoint, tied = tiny_mlm
    ours, _ = from_pretrained(checkpoint)
    assert ours.config.head == "mlm" and ours.pooler is None
    assert ours.config.tie_output is tied
    assert (ours.head.weight is ours.embedding.tokens.weight) is tied
    _assert_same_logits(ours, checkpoint)


@pytest.mark.parametrize("tiny_mlm", [True], ids=["tied"], indirect=True)
def test_an_old_pretraining_checkpoint_imports_as_a_masked_lm(tiny_mlm, tmp_path: Path) -> None:
    """``pytorch_model.bin`` as BERT's original checkpoints have it: LayerNorm ``gamma`` /
    ``beta``, the pooler and next-sentence head (unused), the decoder's tied copies."""
    checkpoint, _ = tiny_mlm
    tensors = {
        name.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta"
        ): tensor
        for name, tensor in load_file(checkpoint / "model.safetensors").items()
    }
    d_model = tensors["bert.embeddings.word_embeddings.weight"].shape[1]
    tensors |= {
        "bert.pooler.dense.weight": torch.randn(d_model, d_model),
        "bert.pooler.dense.bias": torch.randn(d_model),
        "cls.seq_relationship.weight": torch.randn(2, d_model),
        "cls.seq_relationship.bias": torch.randn(2),
        "cls.predictions.decoder.weight": tensors["bert.embeddings.word_embeddings.weight"],
        "cls.predictions.decoder.bias": tensors["cls.predictions.bias"],
    }
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(checkpoint / name, tmp_path / name)
    torch.save({name: t.clone() for name, t in tensors.items()}, tmp_path / "pytorch_model.bin")
    ours, _ = from_pretrained(tmp_path)
    assert ours.config.head == "mlm" and ours.pooler is None
    _assert_same_logits(ours, checkpoint)


def test_an_imported_masked_lm_fills_masks_and_exports_back(
    tiny_mlm, tmp_path: Path, capsys, monkeypatch
) -> None:
    checkpoint, tied = tiny_mlm
    run_dir, exported = tmp_path / "run", tmp_path / "hf"
    assert main(["--quiet", "import-hf", str(checkpoint), "--out", str(run_dir)]) == 0
    assert json.loads((run_dir / "config.json").read_text())["task"] == "mlm"
    status, out, err = run(capsys, monkeypatch, "\n".join(TEXTS), "fill-mask", str(run_dir))
    assert status == 0, err
    task, model = load_run(run_dir)
    assert out == task.predict_lines(model, TEXTS)
    _assert_same_fillers(task, model, checkpoint)
    assert main(["--quiet", "export-hf", str(run_dir), "--out", str(exported)]) == 0
    hf = json.loads((exported / "config.json").read_text())
    assert hf["architectures"] == ["BertForMaskedLM"] and hf["tie_word_embeddings"] is tied
    _, loading = transformers.BertForMaskedLM.from_pretrained(exported, output_loading_info=True)
    assert not any(loading.values()), loading  # nothing missing, unexpected or mismatched
    ours, _ = from_pretrained(exported)
    _assert_same_logits(ours, checkpoint)


def _assert_same_fillers(task, model: torch.nn.Module, checkpoint: Path, top_k: int = 5) -> None:
    """Our ``fill-mask`` fillers are those of ``transformers``' fill-mask pipeline on
    ``checkpoint``: the same tokens in the same order, probabilities within 1e-4."""
    pipeline = transformers.pipeline(
        "fill-mask",
        model=transformers.BertForMaskedLM.from_pretrained(checkpoint),
        tokenizer=transformers.AutoTokenizer.from_pretrained(checkpoint),
        top_k=top_k,
        device="cpu",
    )
    tokenizer = task.tokenizer()
    for text in TEXTS:
        theirs = pipeline(text)
        theirs = theirs if text.count("[MASK]") > 1 else [theirs]
        mine = task.fill(model, text, top_k)
        assert len(mine) == len(theirs) == text.count("[MASK]")
        for candidates, reference in zip(mine, theirs, strict=True):
            assert [token for token, _ in candidates] == tokenizer.tokens(
                [found["token"] for found in reference]
            )
            for (_, probability), found in zip(candidates, reference, strict=True):
                assert abs(probability - found["score"]) <= 1e-4


def test_an_mlm_run_exports_as_bert_for_masked_lm(mlm_run: Path, tmp_path: Path) -> None:
    exported, resaved = tmp_path / "hf", tmp_path / "resaved"
    assert main(["--quiet", "export-hf", str(mlm_run), "--out", str(exported)]) == 0
    hf = json.loads((exported / "config.json").read_text())
    assert hf["architectures"] == ["BertForMaskedLM"] and hf["tie_word_embeddings"] is True
    theirs, loading = transformers.BertForMaskedLM.from_pretrained(
        exported, output_loading_info=True
    )
    assert not any(loading.values()), loading
    theirs.save_pretrained(resaved)  # the tied decoder is left out, as transformers does
    assert load_file(exported / "model.safetensors").keys() == (
        load_file(resaved / "model.safetensors").keys()
    )
    task, model = load_run(mlm_run)
    tokenizer = task.tokenizer()
    for reader in (transformers.AutoTokenizer, transformers.BertTokenizerFast):
        reference = reader.from_pretrained(exported)
        assert (reference.mask_token, reference.mask_token_id) == ("[MASK]", tokenizer.mask_id)
        for text in TEXTS:
            assert reference(text)["input_ids"] == task.encode_masked(text)
    _assert_same_fillers(task, model, exported)
