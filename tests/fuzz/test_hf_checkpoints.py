"""Hugging Face checkpoints whose ``config.json`` holds values of the wrong type, absurd
sizes or missing keys: ``import-hf`` makes a run that loads, or refuses in one line that
names the checkpoint, before any tensor of an absurd size exists."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save

from fuzz.strategies import (
    SCALARS,
    assert_sound_or_refused,
    cli,
    damaged_tensors,
    examples,
    mutated,
)
from scratchformer.run import load_run

pytest.importorskip("transformers")

SIZES = st.sampled_from(
    ["hidden_size", "n_embd", "num_hidden_layers", "n_layer", "vocab_size", "intermediate_size"]
)
HUGE = st.sampled_from([0, -3, 2**31, 2**40, 10**18, 1e300])
FIXTURE = [HealthCheck.function_scoped_fixture]


@pytest.fixture(scope="module")
def checkpoints(tiny_bert, tiny_gpt2, llama_checkpoint, tmp_path_factory) -> list[Path]:
    return [tiny_bert, tiny_gpt2, llama_checkpoint("llama", tmp_path_factory.mktemp("llama"))]


def import_damaged(checkpoint: Path, config: object) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        damaged, run_dir = Path(scratch) / "checkpoint", Path(scratch) / "run"
        damaged.mkdir()
        for file in checkpoint.iterdir():
            (damaged / file.name).symlink_to(file)
        (damaged / "config.json").unlink()
        (damaged / "config.json").write_text(json.dumps(config), encoding="utf-8")
        status, _, err = cli("import-hf", str(damaged), "--out", str(run_dir))
        assert_sound_or_refused(status, err, str(damaged))
        if status == 0:
            load_run(run_dir, need_head=False)


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.data())
def test_a_damaged_config_is_imported_or_refused_in_one_line(checkpoints, data) -> None:
    checkpoint = data.draw(st.sampled_from(checkpoints))
    config = json.loads((checkpoint / "config.json").read_text())
    import_damaged(checkpoint, data.draw(mutated(config)))


@settings(
    max_examples=examples(20),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.data())
def test_absurd_sizes_are_refused_before_any_tensor(checkpoints, data) -> None:
    checkpoint = data.draw(st.sampled_from(checkpoints))
    config = json.loads((checkpoint / "config.json").read_text())
    key = data.draw(SIZES.filter(lambda k: k in config))
    import_damaged(checkpoint, {**config, key: data.draw(HUGE)})


def test_a_checkpoint_without_its_weights_is_refused(tiny_gpt2, tmp_path) -> None:
    damaged = tmp_path / "checkpoint"
    shutil.copytree(tiny_gpt2, damaged)
    (damaged / "model.safetensors").write_bytes(b"\x00" * 10)
    status, _, err = cli("import-hf", str(damaged), "--out", str(tmp_path / "run"))
    assert_sound_or_refused(status, err, str(damaged))
    assert status == 2


@st.composite
def damaged_index(draw: st.DrawFn, index: dict) -> dict:
    """A shard index whose map names files that are missing, wrong or not files, or whose
    entries are of the wrong type."""
    index = json.loads(json.dumps(index))
    names = sorted(index["weight_map"])
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(names))
        index["weight_map"][name] = draw(
            st.sampled_from(["missing.safetensors", "config.json", "../model.safetensors", ""])
            | SCALARS
        )
    if draw(st.booleans()):
        index = draw(mutated(index, changes=1, depth=2))
    return index


def import_with_files(checkpoint: Path, files: dict[str, bytes]) -> None:
    """``checkpoint`` with ``files`` (name -> bytes) in place of its weights, imported."""
    with tempfile.TemporaryDirectory() as scratch:
        damaged, run_dir = Path(scratch) / "checkpoint", Path(scratch) / "run"
        damaged.mkdir()
        for file in checkpoint.iterdir():
            if not file.name.startswith("model.safetensors"):
                (damaged / file.name).symlink_to(file)
        for name, data in files.items():
            (damaged / name).write_bytes(data)
        status, _, err = cli("import-hf", str(damaged), "--out", str(run_dir))
        assert_sound_or_refused(status, err, str(damaged))
        if status == 0:
            load_run(run_dir, need_head=False)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=FIXTURE)
@given(st.data())
def test_damaged_weights_are_imported_or_refused_in_one_line(checkpoints, data) -> None:
    checkpoint = data.draw(st.sampled_from(checkpoints))
    tensors = load_file(checkpoint / "model.safetensors")
    damaged = data.draw(damaged_tensors(tensors))
    import_with_files(checkpoint, {"model.safetensors": safetensors_bytes(damaged)})


@settings(max_examples=examples(20), deadline=None, suppress_health_check=FIXTURE)
@given(st.data())
def test_a_damaged_shard_index_is_imported_or_refused_in_one_line(checkpoints, data) -> None:
    checkpoint = data.draw(st.sampled_from(checkpoints))
    tensors = load_file(checkpoint / "model.safetensors")
    names = sorted(tensors)
    halves = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    files = {
        shard: safetensors_bytes({n: tensors[n] for n in part}) for shard, part in halves.items()
    }
    index = {
        "metadata": {},
        "weight_map": {n: shard for shard, part in halves.items() for n in part},
    }
    files["model.safetensors.index.json"] = json.dumps(data.draw(damaged_index(index))).encode()
    import_with_files(checkpoint, files)


def safetensors_bytes(tensors: dict[str, torch.Tensor]) -> bytes:
    return save({name: tensor.contiguous() for name, tensor in tensors.items()})
