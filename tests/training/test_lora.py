"""LoRA over whole models and runs: merged equals adapted in every architecture, only the
adapters (and an encoder's head) train and are saved, resume, merge and eval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import (
    LATENT,
    LLAMA_STYLE,
    RECIPES,
    TINY_MODEL,
    interrupted_after,
    set_options,
    tiny_config,
)
from scratchformer import build_model
from scratchformer.cli import main
from scratchformer.config import Recipe, TrainConfig
from scratchformer.nn import LoRALinear
from scratchformer.run import load_run, merge
from scratchformer.training.averaging import exponential_average
from scratchformer.training.lora import apply_lora, is_adapted, merge_lora
from scratchformer.training.rundir import MODEL_FILE
from scratchformer.training.trainer import build_optimizer

ALL_TARGETS = ["qkv_proj", "q_proj", "kv_proj", "out_proj", "w1", "w2", "w3"]
ARCHITECTURES = {
    "encoder": {"head": "classification"},
    "decoder": {"n_kv_heads": 2, "gated": True, "activation": "silu"},  # grouped-query
    "seq2seq": {},
}


def adapted_model(arch: str, targets: list[str] = ALL_TARGETS) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(tiny_config(arch=arch, **ARCHITECTURES[arch]))
    apply_lora(model, TrainConfig(lora_rank=4, lora_alpha=8.0, lora_targets=targets))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("lora_B"):
                parameter.normal_(std=0.1)  # as after some training
    return model.eval()


def logits(model: torch.nn.Module, arch: str) -> torch.Tensor:
    ids = torch.randint(4, 29, (2, 9), generator=torch.Generator().manual_seed(1))
    return model(ids, ids).logits if arch == "seq2seq" else model(ids).logits


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_merged_logits_equal_the_adapted_model_s(arch: str) -> None:
    model = adapted_model(arch)
    before = logits(model, arch)
    torch.manual_seed(0)
    base = logits(build_model(tiny_config(arch=arch, **ARCHITECTURES[arch])).eval(), arch)
    assert (before - base).abs().max() > 1e-3  # the adapters change the model
    merge_lora(model)
    assert (logits(model, arch) - before).abs().max() < 1e-5
    assert not is_adapted(model)
    assert all(p.requires_grad for p in model.parameters())
    assert not any("lora" in name for name in model.state_dict())


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_only_adapters_and_the_head_train_and_the_optimizer_holds_exactly_them(
    arch: str,
) -> None:
    model = adapted_model(arch, ["qkv_proj", "w2"])
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    adapters = {name for name in trained if ".lora_" in name}
    head = {name for name in trained if name.startswith("head.")}
    assert trained == adapters | head
    assert {name.rsplit(".", 2)[-2] for name in adapters} == {"qkv_proj", "w2"}
    assert bool(head) == (arch == "encoder")  # a new head must train; an LM head is tied
    optimized = {
        id(p)
        for group in build_optimizer(model, TrainConfig()).param_groups
        for p in group["params"]
    }
    assert optimized == {id(p) for name, p in model.named_parameters() if name in trained}
    assert set(model.state_dict()) == trained
    average = exponential_average(model, 0.9)
    assert set(average.state_dict()) == {f"module.{name}" for name in trained} | {"n_averaged"}


def test_latent_attention_s_maps_take_an_adapter_each_and_merge() -> None:
    """Multi-head latent attention's projections, each one adapter (``kv_a_proj``, the
    latent and the shared key side by side, as PEFT adapts DeepSeek's one map); merged, the
    adapted model's logits."""
    torch.manual_seed(0)
    model = build_model(tiny_config(**LLAMA_STYLE, **LATENT, q_lora_rank=8)).eval()
    ids = torch.randint(4, 29, (2, 9))
    base = model(ids).logits
    targets = ["q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj", "out_proj"]
    apply_lora(model, TrainConfig(lora_rank=4, lora_targets=targets))
    adapters = {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}
    assert {name.rsplit(".", 1)[1] for name in adapters} == set(targets)
    assert len(adapters) == 2 * len(targets) and all(len(m.parts) == 1 for m in adapters.values())
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("lora_B"):
                parameter.normal_(std=0.1)
    adapted = model(ids).logits
    assert (adapted - base).abs().max() > 1e-3
    merge_lora(model)
    assert (model(ids).logits - adapted).abs().max() < 1e-5


def test_targets_that_name_no_linear_map_are_an_error() -> None:
    model = build_model(tiny_config(arch="decoder"))
    with pytest.raises(ValueError, match="lora_targets=\\['w3'\\] name no linear map"):
        apply_lora(model, TrainConfig(lora_rank=2, lora_targets=["w3"]))  # not gated: no w3
    with pytest.raises(ValueError, match="lora_targets"):
        TrainConfig(lora_rank=2, lora_targets=["query"])
    with pytest.raises(ValueError, match="lora_rank=0"):
        TrainConfig(lora_rank=0)
    with pytest.raises(ValueError, match="no LoRA adapters"):
        merge_lora(model)


LORA_RUN = [
    *TINY_MODEL,
    "model.dropout=0.1",  # so that resume must restore the random state exactly
    "train.batch_size=4",
    "train.eval_batches=2",
    "train.lora_rank=4",
    "train.lora_dropout=0.1",
    "train.lora_targets=['qkv_proj', 'q_proj', 'kv_proj', 'out_proj', 'w1']",
]


def lora_run(run_dir: Path, steps: int, *settings: str) -> int:
    every = [f"train.max_steps={steps}", "train.eval_every=3"]
    args = ["--quiet", "train", str(RECIPES / "copy.toml"), "--out", str(run_dir)]
    return main([*args, *set_options([*LORA_RUN, *every, *settings])])


def test_a_lora_run_saves_only_its_adapters_resumes_exactly_and_merges(tmp_path: Path) -> None:
    ema = "train.ema_decay=0.9"
    assert lora_run(tmp_path / "straight", 6, ema) == 0
    with interrupted_after(3):
        assert lora_run(tmp_path / "halves", 6, ema) == 130
    assert (
        main(
            [
                "--quiet",
                "train",
                str(RECIPES / "copy.toml"),
                "--out",
                str(tmp_path / "halves"),
                "--resume",
            ]
        )
        == 0
    )
    for file in ("model.safetensors", "average.safetensors"):
        straight = load_file(tmp_path / "straight" / "checkpoints" / "step-00000006" / file)
        resumed = load_file(tmp_path / "halves" / "checkpoints" / "step-00000006" / file)
        assert straight.keys() == resumed.keys()
        assert all(torch.equal(straight[name], resumed[name]) for name in straight)
    adapters = load_file(tmp_path / "straight" / "checkpoints" / "step-00000006" / MODEL_FILE)
    assert adapters and all(".lora_" in name for name in adapters)  # a seq2seq has no head
    kept = load_file(tmp_path / "straight" / "model.safetensors")
    assert kept.keys() == adapters.keys()

    task, model = load_run(tmp_path / "straight")
    assert is_adapted(model)
    merge(tmp_path / "straight", tmp_path / "merged")
    merged_task, merged_model = load_run(tmp_path / "merged")
    assert not is_adapted(merged_model)
    assert merged_task.recipe.train.lora_rank is None
    ids = torch.randint(4, 12, (2, 7))
    difference = (model(ids, ids).logits - merged_model(ids, ids).logits).abs().max()
    assert difference < 1e-5
    adapted_eval = task.evaluate(model, "val", max_batches=2)
    merged_eval = merged_task.evaluate(merged_model, "val", max_batches=2)
    assert adapted_eval.keys() == merged_eval.keys()
    for name in adapted_eval:
        assert adapted_eval[name] == pytest.approx(merged_eval[name], rel=1e-5)


def test_merge_refuses_a_full_run_and_a_non_empty_directory(tmp_path: Path) -> None:
    assert lora_run(tmp_path / "lora", 1) == 0
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"is not empty \(notes\.txt\)"):
        merge(tmp_path / "lora", tmp_path / "taken")
    recipe = json.loads((tmp_path / "lora" / "config.json").read_text())
    merge(tmp_path / "lora", tmp_path / "full")
    assert Recipe.load(tmp_path / "full" / "config.json").train.lora_rank is None
    assert recipe["train"]["lora_rank"] == 4
    with pytest.raises(ValueError, match="is not a LoRA run"):
        merge(tmp_path / "full", tmp_path / "again")
