"""``scratchformer quantize`` and ``--quantize int8``: a run of int8 weights that opens
exactly as it was saved, and commands that quantize a run once loaded, as it does."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from helpers import run
from scratchformer.cli import build_parser, main
from scratchformer.commands.common import run_of
from scratchformer.inference import quantize
from scratchformer.nn import QuantizedLinear
from scratchformer.predictions import TRANSLATE
from scratchformer.run import load_run

LINES = "123\n4567\n\n99\n"


@pytest.fixture(scope="module")
def runs(copy_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny translation run (the synthetic copy task), and its quantized run."""
    runs = {"float": copy_run, "int8": tmp_path_factory.mktemp("runs") / "q"}
    assert main(["--quiet", "quantize", str(runs["float"]), "--out", str(runs["int8"])]) == 0
    return runs


def source_and_target() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([[4, 5, 6, 7, 3], [8, 9, 3, 0, 0]]), torch.tensor([[1, 4, 5], [1, 8, 9]])


def test_the_run_holds_int8_weights_beside_their_scales_and_reopens_exactly(runs) -> None:
    with safe_open(runs["int8"] / "model.safetensors", framework="pt") as saved:
        assert saved.metadata()["quantization"] == "int8"
        names = set(saved.keys())
        weight = "encoder.layers.0.feed_forward.w1.weight"
        assert saved.get_tensor(weight).dtype == torch.int8
        assert saved.get_tensor(weight.replace("weight", "scales")).dtype == torch.float32
        assert saved.get_tensor("lm_head.weight").dtype == torch.int8
    assert {name for name in names if name.endswith(".scales")}
    _, reopened = load_run(runs["int8"])
    _, quantized = load_run(runs["float"], quantization="int8")
    assert not any(isinstance(m, torch.nn.Linear) for m in reopened.modules())
    assert sum(isinstance(m, QuantizedLinear) for m in reopened.modules()) > 0
    with torch.no_grad():
        expected = quantized(*source_and_target()).logits
        assert torch.equal(reopened(*source_and_target()).logits, expected)


def test_eval_and_translate_quantize_a_run_as_the_quantized_run_holds_it(
    runs, capsys, monkeypatch
) -> None:
    def evaluation(*args: str) -> dict[str, object]:
        status, out, _ = run(capsys, monkeypatch, "", "eval", *args, "--beam", "2")
        assert status == 0
        return json.loads("\n".join(out))

    quantized = evaluation(str(runs["float"]), "--quantize", "int8")
    assert evaluation(str(runs["int8"])) == quantized
    assert evaluation(str(runs["float"]))["loss"] != quantized["loss"]  # int8 weights, really
    translate = ["translate", "--beam", "2"]
    first = run(capsys, monkeypatch, LINES, *translate, str(runs["float"]), "--quantize", "int8")
    assert first[0] == 0 and len(first[1]) == 4 and first[1][2] == ""
    assert run(capsys, monkeypatch, LINES, *translate, str(runs["int8"]))[:2] == first[:2]


def test_bf16_precision_evaluates_and_translates_the_quantized_run_in_bfloat16(
    runs, capsys, monkeypatch
) -> None:
    def evaluation(*args: str) -> dict[str, float]:
        status, out, _ = run(capsys, monkeypatch, "", "eval", str(runs["int8"]), *args)
        assert status == 0
        return json.loads("\n".join(out))

    fp32, bf16 = evaluation("--beam", "2"), evaluation("--beam", "2", "--precision", "bf16")
    assert bf16["loss"] != fp32["loss"]  # rounded to bfloat16 on the way, really
    assert bf16["loss"] == pytest.approx(fp32["loss"], rel=0.05)
    translate = ["translate", str(runs["int8"]), "--beam", "2", "--precision", "bf16"]
    status, out, _ = run(capsys, monkeypatch, LINES, *translate)
    assert status == 0 and len(out) == 4 and out[2] == ""


@pytest.mark.parametrize("command", ["eval", "generate", "translate", "classify", "tag", "answer"])
def test_every_inference_command_takes_quantize_and_precision_and_no_unknown_kind(
    command, capsys
) -> None:
    extra = ["--prompt", "x"] if command == "generate" else []
    args = build_parser().parse_args([command, "RUN", *extra, "--quantize", "int8"])
    assert args.quantize == "int8" and args.precision == "fp32"
    assert build_parser().parse_args([command, "RUN", *extra]).quantize is None
    assert build_parser().parse_args([command, "RUN", *extra, "--precision", "auto"]).precision
    for option, kind in (("--quantize", "int4"), ("--precision", "fp16")):
        assert main([command, "RUN", *extra, option, kind]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"invalid choice: '{kind}'" in err


def test_the_commands_open_their_run_quantized(runs) -> None:
    args = argparse.Namespace(run=str(runs["float"]), quantize="int8", device="cpu")
    _, model = run_of(args, TRANSLATE)
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())


def test_a_quantized_run_that_does_not_fit_its_config_fails_before_allocating(
    runs, tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.setenv("SCRATCHFORMER_MAX_PARAMETERS", str(10**18))  # past the ceiling
    assert main(["--quiet", "quantize", str(runs["int8"]), "--out", str(tmp_path / "q")]) == 0
    config = tmp_path / "q" / "config.json"
    values = json.loads(config.read_text())
    values["model"]["d_ff"] = 2**38  # 32 x 2**38 int8 values: 8 TiB
    config.write_text(json.dumps(values))
    assert main(["eval", str(tmp_path / "q")]) == 2
    err = capsys.readouterr().err
    assert "model.safetensors does not fit" in err and f"{2**38}" in err


def test_what_a_quantized_run_cannot_be_or_go_to(runs, tmp_path, capsys) -> None:
    assert main(["quantize", str(runs["float"]), "--out", str(runs["int8"])]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert main(["export-hf", str(runs["int8"]), "--out", str(tmp_path / "hf")]) == 2
    assert "holds int8 weights, which no Hugging Face checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()
    assert main(["export-onnx", str(runs["int8"]), "--out", str(tmp_path / "onnx")]) == 2
    assert "holds int8 weights, which the ONNX export does not write" in capsys.readouterr().err


def test_a_lora_run_is_quantized_with_its_adapters_merged(
    lora_copy_run: Path, tmp_path: Path, capsys
) -> None:
    _, adapted = load_run(lora_copy_run)
    with pytest.raises(ValueError, match="LoRA adapters: merge them"):
        quantize(adapted)
    assert main(["--quiet", "quantize", str(lora_copy_run), "--out", str(tmp_path / "q")]) == 0
    task, reopened = load_run(tmp_path / "q")
    assert task.recipe.train.lora_rank is None
    _, quantized = load_run(lora_copy_run, quantization="int8")
    assert main(["--quiet", "merge", str(lora_copy_run), "--out", str(tmp_path / "m")]) == 0
    _, merged = load_run(tmp_path / "m", quantization="int8")
    with torch.no_grad():
        expected = merged(*source_and_target()).logits
        assert torch.equal(reopened(*source_and_target()).logits, expected)
        assert torch.equal(quantized(*source_and_target()).logits, expected)
