"""BERT-family checkpoints in our encoder: all-MiniLM-L6-v2 against ``transformers`` and
``sentence-transformers``, the round trip through a run directory, and clear errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from scratchformer import from_pretrained
from scratchformer.cli import main
from scratchformer.data.batching import pad_batch

SENTENCES = [
    "A man is playing a guitar.",
    "Transformers read whole sentences at once, which makes them fast to train on GPUs.",
    "Héllo, wörld!",
    "Short.",
]
PAIRS = [("How old are you?", "What is your age?"), ("The cat sat.", "On the mat, it sat.")]


@pytest.fixture(scope="module")
def ours(minilm: Path):
    return from_pretrained(minilm)


@pytest.fixture(scope="module")
def theirs(minilm: Path):
    model = transformers.BertModel.from_pretrained(minilm).eval()
    return model, transformers.AutoTokenizer.from_pretrained(minilm)


def _batch(tokenizer, texts: list[str]) -> dict[str, torch.Tensor]:
    """Our ``[CLS] text [SEP]`` ids, right-padded, with mask and segment ids."""
    ids, mask = pad_batch(
        [[tokenizer.cls_id, *tokenizer.encode(t), tokenizer.sep_id] for t in texts],
        tokenizer.pad_id,
    )
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def test_hidden_states_and_pooler_match_transformers(ours, theirs) -> None:
    model, tokenizer = ours
    batch = _batch(tokenizer, SENTENCES)
    with torch.no_grad():
        mine = model(**batch)
        reference = theirs[0](**batch)
    real = batch["attention_mask"].bool()
    assert real.sum(1).unique().numel() == len(SENTENCES)  # padded, of different lengths
    difference = (mine.last_hidden_state - reference.last_hidden_state)[real].abs().max()
    assert difference < 1e-4
    assert (mine.pooler_output - reference.pooler_output).abs().max() < 1e-4


def test_sentence_embeddings_match_sentence_transformers(ours, minilm: Path) -> None:
    sentence_transformers = pytest.importorskip("sentence_transformers")
    model, tokenizer = ours
    batch = _batch(tokenizer, SENTENCES)
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    mine = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    reference = sentence_transformers.SentenceTransformer(str(minilm), device="cpu")
    theirs = torch.from_numpy(reference.encode(SENTENCES))
    assert torch.nn.functional.cosine_similarity(mine, theirs).min() > 0.99999


def test_tokenizer_gives_the_checkpoints_own_ids(ours, theirs) -> None:
    tokenizer, reference = ours[1], theirs[1]
    assert tokenizer.specials == {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103}
    for text in SENTENCES:
        mine = [tokenizer.cls_id, *tokenizer.encode(text), tokenizer.sep_id]
        assert mine == reference(text)["input_ids"]
    for a, b in PAIRS:
        expected = reference(a, b)
        assert tokenizer.encode_pair(a, b) == (expected["input_ids"], expected["token_type_ids"])
    long = " ".join(SENTENCES * 40)
    assert len(tokenizer.encode(long)) > 128  # the tokenizer.json's own truncation is off


def test_round_trip_through_a_run_directory(ours, minilm: Path, tmp_path: Path, capsys) -> None:
    run_dir, exported = tmp_path / "run", tmp_path / "hf"
    assert main(["import-hf", str(minilm), "--out", str(run_dir)]) == 0
    assert main(["export-hf", str(run_dir), "--out", str(exported)]) == 0
    capsys.readouterr()
    model, tokenizer = ours
    batch = _batch(tokenizer, SENTENCES)
    loaded = transformers.AutoModel.from_pretrained(exported).eval()
    with torch.no_grad():
        mine, theirs = model(**batch), loaded(**batch)
    real = batch["attention_mask"].bool()
    assert (mine.last_hidden_state - theirs.last_hidden_state)[real].abs().max() < 1e-4
    assert (mine.pooler_output - theirs.pooler_output).abs().max() < 1e-4
    reference = transformers.AutoTokenizer.from_pretrained(exported)
    for a, b in PAIRS:
        expected = reference(a, b)
        assert tokenizer.encode_pair(a, b) == (expected["input_ids"], expected["token_type_ids"])


def test_old_pickled_checkpoints_with_prefixes_and_pretraining_heads_load(
    tiny_bert: Path, tmp_path: Path
) -> None:
    """``pytorch_model.bin`` of a ``BertForPreTraining``: ``bert.`` prefixes, LayerNorm
    ``gamma`` / ``beta``, and ``cls.*`` heads that we drop."""
    tensors = load_file(tiny_bert / "model.safetensors")
    renamed = {
        "bert."
        + name.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta"
        ): tensor
        for name, tensor in tensors.items()
    }
    renamed["cls.predictions.bias"] = torch.zeros(30522)
    shutil.copy(tiny_bert / "config.json", tmp_path / "config.json")
    torch.save(renamed, tmp_path / "pytorch_model.bin")
    with pytest.warns(UserWarning, match="no tokenizer.json"):
        model, tokenizer = from_pretrained(tmp_path)
    expected, _ = from_pretrained(tiny_bert)
    assert tokenizer is None
    ids = torch.randint(0, 30522, (2, 7))
    torch.testing.assert_close(model(ids).pooler_output, expected(ids).pooler_output)


def test_a_checkpoint_without_pooler_gives_no_pooler_output(
    tiny_bert: Path, tmp_path: Path
) -> None:
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(tiny_bert / name, tmp_path / name)
    tensors = load_file(tiny_bert / "model.safetensors")
    save_file(
        {k: v for k, v in tensors.items() if not k.startswith("pooler.")},
        tmp_path / "model.safetensors",
    )
    model, _ = from_pretrained(tmp_path)
    assert not model.config.pooler and model(torch.tensor([[101, 102]])).pooler_output is None


def _broken(tiny_bert: Path, directory: Path, kind: str) -> None:
    """A copy of the tiny BERT with one thing wrong."""
    shutil.copytree(tiny_bert, directory)
    tensors = load_file(directory / "model.safetensors")
    if kind == "missing":
        del tensors["encoder.layer.1.attention.self.key.weight"]
    elif kind == "shape":
        tensors["embeddings.position_embeddings.weight"] = torch.zeros(32, 32)
    elif kind == "unexpected":
        tensors["classifier.weight"] = torch.zeros(2, 32)
    elif kind == "terabytes":  # a 2**38 x 32 matrix: 32 TiB, refused before it is allocated
        config = (directory / "config.json").read_text()
        config = config.replace('"intermediate_size": 64', f'"intermediate_size": {2**38}')
        (directory / "config.json").write_text(config)
    else:
        config = (directory / "config.json").read_text().replace('"bert"', '"roberta"')
        (directory / "config.json").write_text(config)
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})


BROKEN = {
    "missing": "missing: encoder.layer.1.attention.self.key.weight",
    "shape": r"embeddings.position_embeddings.weight is \(32, 32\), the config needs \(64, 32\)",
    "unexpected": "unexpected: classifier.weight",
    "terabytes": rf"intermediate.dense.weight is \(64, 32\), the config needs \({2**38}, 32\)",
    "model_type": "model_type='roberta' is not supported; supported: bert, gpt2",
}


@pytest.mark.parametrize("kind", BROKEN)
def test_broken_checkpoints_give_clear_errors(
    kind: str, tiny_bert: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setenv("SCRATCHFORMER_MAX_PARAMETERS", str(10**18))  # past the ceiling
    _broken(tiny_bert, tmp_path / "hf", kind)
    with pytest.raises(ValueError, match=BROKEN[kind]):
        from_pretrained(tmp_path / "hf")
    status = main(["import-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and err.startswith("scratchformer: error: ")
    assert not (tmp_path / "run" / "config.json").exists()


def test_an_imported_encoder_needs_a_fine_tune_before_classify(
    tiny_bert: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    assert main(["import-hf", str(tiny_bert), "--out", str(tmp_path / "run")]) == 0
    monkeypatch.setattr("sys.stdin", ["a sentence\n"])
    assert main(["classify", str(tmp_path / "run")]) == 2
    assert "fine-tune it first" in capsys.readouterr().err


class _Payload:
    def __reduce__(self):
        return print, ("pickled code ran",)


def test_pickled_code_in_a_bin_file_is_never_run(tiny_bert: Path, tmp_path: Path, capsys) -> None:
    shutil.copy(tiny_bert / "config.json", tmp_path / "config.json")
    torch.save({"x": _Payload()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="not a file of plain tensors"):
        from_pretrained(tmp_path)
    assert "pickled code ran" not in capsys.readouterr().out
