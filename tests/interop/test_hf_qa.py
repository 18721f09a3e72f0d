"""Question-answering models in and out of Hugging Face: a ``BertForQuestionAnswering``
imports as a span head, and a qa run exports as one, with the same start and end logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers

from helpers import run
from scratchformer import from_pretrained
from scratchformer.cli import main

QUESTIONS = [("Who wrote it?", "Ada wrote it in 1843."), ("Where?", "In Köln — naïve café.")]


@pytest.fixture(scope="module")
def tiny_qa(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``BertForQuestionAnswering`` of the tiny sizes with random weights."""
    torch.manual_seed(0)
    config = transformers.BertConfig.from_pretrained(tiny_bert)
    directory = tmp_path_factory.mktemp("tiny-qa")
    model = transformers.BertForQuestionAnswering(config)
    with torch.no_grad():  # a head far from zero, so that differences show
        model.qa_outputs.weight.normal_(std=1.0)
        model.qa_outputs.bias.uniform_(-1, 1)
    model.save_pretrained(directory)
    for path in tiny_bert.glob("*token*"):
        (directory / path.name).write_bytes(path.read_bytes())
    return directory


def _inputs(tokenizer) -> dict[str, torch.Tensor]:
    from scratchformer.data.batching import pad_batch

    rows = [tokenizer.encode_pair(q, c) for q, c in QUESTIONS]
    ids, mask = pad_batch([ids for ids, _ in rows], tokenizer.pad_id)
    segments, _ = pad_batch([segments for _, segments in rows], 0)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": segments}


def _assert_same_logits(ours: torch.nn.Module, theirs: torch.nn.Module, inputs) -> None:
    with torch.no_grad():
        mine = ours(**inputs).logits
        reference = theirs(**inputs)
    real = inputs["attention_mask"].bool()
    assert (mine[..., 0] - reference.start_logits)[real].abs().max() <= 1e-4
    assert (mine[..., 1] - reference.end_logits)[real].abs().max() <= 1e-4


def test_a_bert_for_question_answering_imports_with_a_span_head(tiny_qa: Path) -> None:
    ours, tokenizer = from_pretrained(tiny_qa)
    assert ours.config.head == "span" and ours.pooler is None
    theirs = transformers.BertForQuestionAnswering.from_pretrained(tiny_qa).eval()
    _assert_same_logits(ours, theirs, _inputs(tokenizer))


def test_a_qa_run_exports_as_bert_for_question_answering(
    tiny_qa: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    run_dir, exported = tmp_path / "run", tmp_path / "hf"
    assert main(["--quiet", "import-hf", str(tiny_qa), "--out", str(run_dir)]) == 0
    assert json.loads((run_dir / "config.json").read_text())["task"] == "qa"
    status, out, err = run(capsys, monkeypatch, "Who?\tAda wrote it.\n", "answer", str(run_dir))
    assert status == 0, err
    assert out[0].split("\t")[0] in "Ada wrote it."
    assert main(["--quiet", "export-hf", str(run_dir), "--out", str(exported)]) == 0
    hf = json.loads((exported / "config.json").read_text())
    assert hf["architectures"] == ["BertForQuestionAnswering"]
    theirs, loading = transformers.BertForQuestionAnswering.from_pretrained(
        exported, output_loading_info=True
    )
    assert not any(loading.values()), loading  # nothing missing, unexpected or mismatched
    ours, tokenizer = from_pretrained(exported)
    _assert_same_logits(ours, theirs.eval(), _inputs(tokenizer))
