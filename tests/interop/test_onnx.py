"""ONNX export: the exported graph, run by ONNX Runtime, against our model (within 1e-4 on
padded batches of mixed lengths), and the commands' outputs through ``--onnx`` against the
run's own, line for line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers import FILLER, LATENT, run
from scratchformer import ModelConfig, build_model
from scratchformer.cli import main
from scratchformer.interop.onnx import OnnxRuntimeModel, check_destination, export_onnx

TOLERANCE = 1e-4
"""Largest difference allowed between ONNX Runtime's outputs and ours (float32)."""

SMALL = dict(arch="encoder", vocab_size=60, d_model=16, n_heads=2, n_layers=2, d_ff=32)


def padded_batch(vocab_size: int, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids, and a mask with the given lengths of real tokens (the rest padding)."""
    ids = torch.randint(1, vocab_size, (len(lengths), max(lengths)))
    mask = torch.arange(max(lengths)) < torch.tensor(lengths)[:, None]
    return ids * mask, mask.long()


@pytest.mark.parametrize(
    "fields",
    [
        # BERT's layout: post-LN, learned positions, segments, a pooled classification head
        dict(head="classification", num_labels=3, type_vocab_size=2, norm_first=False),
        # a tagger with rotary positions, and a bi-encoder's unit vectors with ALiBi and
        # multi-head latent attention (low-rank queries)
        dict(head="token_classification", num_labels=5, positional="rotary"),
        dict(head="similarity", positional="alibi", pooling="mean", **LATENT, q_lora_rank=6),
    ],
    ids=["classification", "tagging", "similarity"],
)
def test_the_exported_graph_computes_what_our_model_does(fields, tmp_path) -> None:
    model = build_model(ModelConfig(**SMALL, max_len=64, **fields)).eval()
    export_onnx(model, tmp_path, "{}", {"task": "test", "labels": None})
    exported = OnnxRuntimeModel(tmp_path)
    about = json.loads((tmp_path / "config.json").read_text())
    segments = "token_type_ids" in about["inputs"]
    assert segments == bool(fields.get("type_vocab_size"))
    for lengths in ([9, 3, 6, 1], [40], [2, 64]):  # batch and length differ from the trace's
        ids, mask = padded_batch(SMALL["vocab_size"], lengths)
        types = (torch.arange(ids.shape[1]) >= 2).long().expand_as(ids) * mask if segments else None
        with torch.no_grad():
            hidden, _ = model.encode(ids, mask, token_type_ids=types)
        theirs = exported(ids, mask, token_type_ids=types)
        real = mask.bool()
        assert (hidden - theirs.last_hidden_state)[real].abs().max() < TOLERANCE
        if fields["head"] == "similarity":  # unit-length mean of the real tokens' states
            vectors = exported.run({"input_ids": ids, "attention_mask": mask})
            mean = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
            expected = torch.nn.functional.normalize(mean, dim=-1)
            assert (vectors["sentence_embedding"] - expected).abs().max() < TOLERANCE
            continue
        with torch.no_grad():
            ours = model(ids, mask, token_type_ids=types)
        difference = ours.logits - theirs.logits
        if ours.logits.dim() == 3:
            difference = difference[real]
        assert difference.abs().max() < TOLERANCE


def test_an_export_of_an_earlier_version_runs_with_one_note(tmp_path: Path) -> None:
    """An export whose model config holds ``init_from`` and ELECTRA's fields flat, as earlier
    versions wrote them, runs as the export it is."""
    model = build_model(ModelConfig(**SMALL, max_len=64, head="classification")).eval()
    export_onnx(model, tmp_path, "{}", {"task": "test", "labels": None})
    about = json.loads((tmp_path / "config.json").read_text())
    about["model"] |= {"init_from": None, **about["model"].pop("rtd")}
    (tmp_path / "config.json").write_text(json.dumps(about))
    with pytest.warns(FutureWarning, match=r"model.init_from \(now train.init_from\)"):
        exported = OnnxRuntimeModel(tmp_path)
    assert exported.config == model.config


def test_classify_through_onnx_prints_what_the_run_prints(
    classification_run, tmp_path, capsys, monkeypatch
) -> None:
    out_dir = tmp_path / "onnx"
    status, _, _ = run(
        capsys, monkeypatch, "", "export-onnx", str(classification_run), "--out", str(out_dir)
    )
    assert status == 0 and sorted(p.name for p in out_dir.iterdir()) == [
        "config.json",
        "model.onnx",
        "tokenizer.json",
    ]
    lines = "good fun\n\nbad dull dull fun\nfun good bad\n"
    _, ours, _ = run(capsys, monkeypatch, lines, "classify", str(classification_run))
    status, theirs, _ = run(
        capsys, monkeypatch, lines, "classify", str(classification_run), "--onnx", str(out_dir)
    )
    assert status == 0 and len(theirs) == len(ours) == 4
    for mine, exported in zip(ours, theirs, strict=True):
        label, probability = mine.split("\t")
        label_x, probability_x = exported.split("\t")
        assert label == label_x and float(probability) == pytest.approx(
            float(probability_x), abs=2e-4
        )
    check_destination(out_dir)  # an earlier export may be replaced; other files may not
    (out_dir / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"is not empty \(config.json, model.onnx, notes.txt"):
        check_destination(out_dir)


@pytest.fixture(scope="module")
def qa_export(qa_run, tmp_path_factory) -> Path:
    """The shared QA run, exported by the command line."""
    out_dir = tmp_path_factory.mktemp("qa-onnx") / "onnx"
    assert main(["--quiet", "export-onnx", str(qa_run), "--out", str(out_dir)]) == 0
    return out_dir


def test_answer_through_onnx_prints_what_the_run_prints(
    qa_run, qa_export, capsys, monkeypatch
) -> None:
    contexts = [f"{FILLER} The winner is Ada. Then more.", "The winner is Zoë in Köln."]
    lines = f"Who won?\t{contexts[0]}\n\nWho won?\t{contexts[1]}\n"
    _, ours, _ = run(capsys, monkeypatch, lines, "answer", str(qa_run))
    status, theirs, _ = run(
        capsys, monkeypatch, lines, "answer", str(qa_run), "--onnx", str(qa_export)
    )
    assert status == 0 and len(theirs) == 3
    assert [line.split("\t")[0] for line in theirs] == [line.split("\t")[0] for line in ours]


def test_what_cannot_be_exported_or_run_is_refused_in_one_line(
    copy_run, classification_run, qa_export, tmp_path, capsys, monkeypatch
) -> None:
    status, _, err = run(
        capsys, monkeypatch, "", "export-onnx", str(copy_run), "--out", str(tmp_path / "x")
    )
    assert status == 2 and "export-onnx exports encoder runs" in err and err.count("\n") == 1
    refusals = {
        ("--onnx", str(qa_export)): "not of this 'classification' run's",
        ("--onnx", str(tmp_path)): "no model.onnx; is it a directory written by export-onnx?",
        ("--onnx", str(qa_export), "--quantize", "int8"): "leave out --quantize",
    }
    for options, message in refusals.items():
        status, _, err = run(
            capsys, monkeypatch, "good\n", "classify", str(classification_run), *options
        )
        assert status == 2 and message in err and err.count("\n") == 1, options
