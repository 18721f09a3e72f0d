"""Atomic writes leave the old file or the new one; weights round-trip through safetensors
with their ties; nothing is ever loaded through pickle."""

import ast
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file, save_model
from torch import nn

import scratchformer
from helpers import assert_same_weights, decoder
from scratchformer import ModelConfig, build_model
from scratchformer.io import (
    atomic_write,
    atomic_write_json,
    atomic_write_text,
    load_weights,
    save_weights,
)


def seq2seq(**overrides) -> nn.Module:
    values = dict(arch="seq2seq", vocab_size=30, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    return build_model(ModelConfig(**{**values, **overrides}))


# Atomic writes ---------------------------------------------------------------------------


def test_atomic_write_replaces_the_file_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    atomic_write_text(path, "old")
    atomic_write(path, lambda temp: temp.write_bytes(b"new"))
    assert path.read_text() == "new"
    atomic_write_json(tmp_path / "state.json", {"b": [1, 2.5], "a": None})
    assert json.loads((tmp_path / "state.json").read_text()) == {"a": None, "b": [1, 2.5]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "state.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    atomic_write_text(path, "old")

    def half_then_fail(temp: Path) -> None:
        temp.write_text("half of the n")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        atomic_write(path, half_then_fail)
    with pytest.raises(TypeError):
        atomic_write_json(path, {"tensor": torch.zeros(1)})
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


# Weights ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "tied"),
    [
        (decoder, [("lm_head.weight", "embedding.tokens.weight")]),
        (
            lambda: seq2seq(share_embeddings=True),
            [
                ("tgt_embedding.tokens.weight", "src_embedding.tokens.weight"),
                ("lm_head.weight", "src_embedding.tokens.weight"),
            ],
        ),
        (lambda: decoder(tie_output=False, positional="learned"), []),
    ],
    ids=["tied-output", "shared-embeddings", "untied"],
)
def test_weights_round_trip_bit_exact_with_ties_kept(build, tied, tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    model = build()
    save_weights(path, model)
    with safe_open(path, framework="pt") as f:
        stored = set(f.keys())
    assert len(stored) == len({id(t) for t in model.state_dict(keep_vars=True).values()})

    torch.manual_seed(1)
    fresh = build()
    assert load_weights(path, fresh) == ([], [])
    assert_same_weights(model, fresh)
    for alias, name in tied:
        assert fresh.get_parameter(alias) is fresh.get_parameter(name)


def test_files_of_safetensors_save_model_load_too(tmp_path: Path) -> None:
    model = seq2seq(share_embeddings=True)
    save_model(model, str(tmp_path / "model.safetensors"))  # keeps other names of the ties
    fresh = seq2seq(share_embeddings=True)
    load_weights(tmp_path / "model.safetensors", fresh)
    assert_same_weights(model, fresh)


def test_mismatched_weights_name_the_tensors_and_load_nothing(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_weights(path, decoder())
    model = decoder(vocab_size=31)
    before = {name: t.clone() for name, t in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"embedding.tokens.weight is \(30, 16\) in the file, "):
        load_weights(path, model)
    assert all(torch.equal(before[n], t) for n, t in model.state_dict().items())

    with pytest.raises(
        ValueError, match=r"does not fit DecoderModel: missing: decoder\.layers\.2\."
    ):
        load_weights(path, decoder(n_layers=3))
    with pytest.raises(ValueError, match=r"unexpected: decoder\.layers\.1\."):
        load_weights(path, decoder(n_layers=1))
    missing, unexpected = load_weights(path, decoder(n_layers=1), strict=False)
    assert missing == [] and unexpected[0].startswith("decoder.layers.1.")


def test_a_tensor_saved_apart_is_unexpected_in_a_tied_model(tmp_path: Path) -> None:
    save_weights(tmp_path / "untied.safetensors", decoder(tie_output=False))
    with pytest.raises(ValueError, match=r"unexpected: lm_head\.weight$"):
        load_weights(tmp_path / "untied.safetensors", decoder())


def test_a_file_that_is_not_safetensors_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match="is not a safetensors file"):
        load_weights(path, decoder())
    save_file({"x": torch.zeros(2)}, path)
    with pytest.raises(ValueError, match=r"missing: embedding\.tokens\.weight, .*; unexpected: x$"):
        load_weights(path, decoder())


# Loading ------------------------------------------------------------------------------------


def test_torch_load_is_only_called_with_weights_only() -> None:
    calls = 0
    for source in Path(scratchformer.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.load":
                calls += 1
                safe = any(
                    k.arg == "weights_only" and ast.unparse(k.value) == "True"
                    for k in node.keywords
                )
                assert safe, f"{source}:{node.lineno} calls torch.load without weights_only=True"
    assert calls >= 1


def test_io_imports_nothing_of_the_package() -> None:
    """Every layer writes its files through io, so io depends on none of them."""
    tree = ast.parse(Path(scratchformer.io.__file__).read_text(encoding="utf-8"))
    modules = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ]
    modules += [
        "." * node.level + (node.module or "")
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    ]
    assert "torch" in modules
    assert [name for name in modules if name.startswith((".", "scratchformer"))] == []
