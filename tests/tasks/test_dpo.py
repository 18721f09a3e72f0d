"""Direct preference optimisation of a chat fine-tune of ours (``sft_run``): a pair's rows,
a LoRA run that learns a clear preference, the reference of a full fine-tune (also on
resuming), and the refusals of bad data and settings."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from helpers import PREFERENCES, RAMBLING, dpo, pairs_file
from scratchformer.cli import main
from scratchformer.data.preferences import PreferencePair
from scratchformer.nn.loss import IGNORE_INDEX
from scratchformer.opening import open_task
from scratchformer.run import load_run, merge
from scratchformer.tasks import build_task
from scratchformer.tasks.dpo import Located, PreferenceTask


def dpo_task(sft_run: Path, template: bool = True) -> PreferenceTask:
    """A dpo task with ``sft_run``'s tokenizer and (if ``template``) its chat template."""
    chat, recipe = open_task(sft_run)
    task = build_task(dataclasses.replace(recipe, task="dpo"))
    assert isinstance(task, PreferenceTask)
    task.tokenizers = chat.tokenizers
    task.chat_template = chat.chat_template if template else None
    return task


def learnt(task: PreferenceTask, targets: list[int]) -> str:
    return task.tokenizer().decode([t for t in targets if t != IGNORE_INDEX], skip_special=False)


def test_a_pairs_rows_count_its_responses_only(sft_run: Path) -> None:
    history = (
        {"role": "user", "content": "What is the question?"},
        {"role": "assistant", "content": "To be."},
        {"role": "user", "content": "And then?"},
    )
    pairs = [
        Located("p.jsonl", PreferencePair(history, "Not to be.", "Nobler.", 1)),
        Located("p.jsonl", PreferencePair("And then?", "In the mind.", "Or not.", 2)),
    ]
    task = dpo_task(sft_run)
    conversation, plain = task.encode(pairs)
    assert [learnt(task, row.targets) for row in (conversation.chosen, conversation.rejected)] == [
        "Not to be.</s>",
        "Nobler.</s>",
    ]
    assert [learnt(task, row.targets) for row in (plain.chosen, plain.rejected)] == [
        "In the mind.</s>",
        "Or not.</s>",
    ]
    rendered = task.tokenizer().decode(plain.chosen.ids, skip_special=False)
    assert rendered.startswith("<|im_start|>user\nAnd then?</s>\n<|im_start|>assistant\n")

    task = dpo_task(sft_run, template=False)
    (plain,) = task.encode(pairs[1:])
    assert learnt(task, plain.chosen.targets) == "In the mind.</s>"
    assert task.tokenizer().decode(plain.chosen.ids) == "And then?In the mind."
    batch = task.collate([plain, plain])
    assert batch.targets.shape[:2] == batch.inputs["input_ids"].shape[:2] == (2, 2)
    with pytest.raises(ValueError, match=r"p\.jsonl:1: a conversation needs a chat template"):
        task.encode(pairs[:1])


def test_a_lora_run_learns_a_clear_preference(
    dpo_run: Path, sft_run: Path, tmp_path: Path, capsys
) -> None:
    records = [json.loads(line) for line in (dpo_run / "metrics.jsonl").read_text().splitlines()]
    first = records[0]
    assert first["split"] == "train" and first["loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert first["rewards/margins"] == pytest.approx(0, abs=1e-5)

    held = pairs_file(tmp_path / "held.jsonl", PREFERENCES[3:])
    capsys.readouterr()
    assert main(["eval", str(dpo_run), "--data", str(held)]) == 0
    held_out = json.loads(capsys.readouterr().out)
    assert held_out["rewards/accuracies"] > 0.5 and held_out["loss"] < math.log(2)

    merge(dpo_run, tmp_path / "merged")
    task, _ = load_run(tmp_path / "merged")
    assert task.chat_template == dpo_task(sft_run).chat_template


def test_a_full_fine_tunes_reference_is_the_start_also_on_resuming(
    sft_run: Path, tmp_path: Path, monkeypatch
) -> None:
    references = []
    prepare = PreferenceTask.prepare_model

    def kept(task: PreferenceTask, model: torch.nn.Module) -> None:
        prepare(task, model)
        references.append((task.reference, model))

    monkeypatch.setattr(PreferenceTask, "prepare_model", kept)
    pair = {"prompt": "To be?", "chosen": "Yes.", "rejected": RAMBLING}
    data = pairs_file(tmp_path / "pairs.jsonl", [pair])
    settings = [f"train.init_from='{sft_run}'", "train.lr=1e-2", "train.eval_every=1"]
    assert dpo(tmp_path / "run", data, *settings, "train.max_steps=1") == 0
    command = ["--quiet", "train", str(tmp_path / "dpo.toml"), "--out", str(tmp_path / "run")]
    assert main([*command, "--resume", "--set", "train.max_steps=2"]) == 0
    _, start = load_run(sft_run)
    for reference, policy in references:
        assert not reference.shared and reference.model is not policy
        assert not any(p.requires_grad for p in reference.model.parameters())
        for name, weight in reference.model.state_dict().items():
            torch.testing.assert_close(weight, start.state_dict()[name], rtol=0, atol=0)
    assert len(references) == 2


def test_bad_data_and_settings_are_refused_in_one_line(
    sft_run: Path, tmp_path: Path, capsys
) -> None:
    good = {"prompt": "To be?", "chosen": "Yes.", "rejected": "No."}
    no_chosen = pairs_file(tmp_path / "a.jsonl", [good, {"prompt": "To be?", "rejected": "No."}])
    no_prompt = pairs_file(tmp_path / "b.jsonl", [{**good, "prompt": ""}])
    start = f"train.init_from='{sft_run}'"
    cases = [
        (no_chosen, [start], f"{no_chosen}:2: missing 'chosen'"),
        (no_prompt, [start], f"{no_prompt}:1: 'prompt' is empty"),
        (pairs_file(tmp_path / "c.jsonl", [good]), [], "dpo fine-tunes a language model"),
    ]
    for number, (data, settings, message) in enumerate(cases):
        capsys.readouterr()
        assert dpo(tmp_path / f"run{number}", data, "train.max_steps=1", *settings) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
