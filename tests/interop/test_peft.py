"""LoRA adapters out in PEFT's layout (``save_adapter``, ``scratchformer export-peft``):
``peft`` loads them onto the Hugging Face base model and computes our adapted model's
hidden states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers import RECIPES, set_options
from scratchformer import from_pretrained
from scratchformer.cli import main
from scratchformer.config import TrainConfig
from scratchformer.interop.peft import ADAPTER_CONFIG_FILE, save_adapter
from scratchformer.run import load_run
from scratchformer.training.lora import apply_lora

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")


def test_peft_loads_the_adapters_of_a_bert_onto_its_checkpoint(
    tiny_bert: Path, tmp_path: Path
) -> None:
    model, _ = from_pretrained(tiny_bert)
    config = TrainConfig(lora_rank=3, lora_alpha=6.0, lora_targets=["qkv_proj", "out_proj", "w1"])
    apply_lora(model, config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("lora_B"):
                parameter.normal_(std=0.2)  # as after some training
    save_adapter(model, tmp_path / "adapter")
    settings = json.loads((tmp_path / "adapter" / ADAPTER_CONFIG_FILE).read_text())
    assert "encoder.layer.0.attention.self.query" in settings["target_modules"]
    assert "encoder.layer.1.intermediate.dense" in settings["target_modules"]
    assert "encoder.layer.1.output.dense" not in settings["target_modules"]  # w2: not adapted

    base = transformers.BertModel.from_pretrained(tiny_bert)
    adapted = peft.PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    ids = torch.randint(1000, 2000, (2, 11), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    with torch.no_grad():
        theirs = adapted(input_ids=ids, attention_mask=mask).last_hidden_state
        ours = model.eval()(ids, attention_mask=mask).last_hidden_state
        plain = base.eval()  # PEFT adapts the base in place: compare with adapters off
        with adapted.disable_adapter():
            unadapted = plain(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert (ours[real] - theirs[real]).abs().max() < 1e-4
    assert (unadapted[real] - theirs[real]).abs().max() > 1e-2  # the adapters count


def test_export_peft_writes_a_lora_runs_adapters_that_peft_loads(
    tiny_bert: Path, tmp_path: Path, capsys
) -> None:
    data = tmp_path / "data.tsv"
    data.write_text("text\tlabel\n" + "a fine film\tpos\nawful\tneg\n" * 8)
    options = [
        f"train.init_from='{tiny_bert}'",
        "data.dataset=none",
        f"data.train='{data}'",
        f"data.val='{data}'",
        "data.text_columns=['text']",
        "data.label_column='label'",
        "data.max_len=64",  # the tiny checkpoint's positions
        "train.max_steps=4",
        "train.eval_every=4",
        "train.batch_size=4",
        "train.lr=0.05",  # for the adapters to move away from B = 0 in a few steps
        "train.lora_rank=2",
        "train.lora_targets=['qkv_proj', 'w1']",
    ]
    run_dir, out = tmp_path / "run", tmp_path / "adapter"
    args = ["--quiet", "train", str(RECIPES / "sst2-minilm.toml"), "--out", str(run_dir)]
    assert main([*args, *set_options(options)]) == 0
    assert main(["export-peft", str(run_dir), "--out", str(out)]) == 0

    base = transformers.BertModel.from_pretrained(tiny_bert)
    adapted = peft.PeftModel.from_pretrained(base, out).eval()
    _, model = load_run(run_dir)
    ids = torch.randint(1000, 2000, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs = adapted(input_ids=ids).last_hidden_state
        ours = model(ids).last_hidden_state
        with adapted.disable_adapter():
            unadapted = base(input_ids=ids).last_hidden_state
    assert (ours - theirs).abs().max() < 1e-4
    assert (unadapted - theirs).abs().max() > 1e-3  # the trained adapters count

    capsys.readouterr()
    assert main(["merge", str(run_dir), "--out", str(tmp_path / "merged")]) == 0
    assert main(["export-peft", str(tmp_path / "merged"), "--out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a LoRA run" in err
    assert not (tmp_path / "none").exists()
