"""Supervised chat fine-tuning of a language model of ours: the default template, the
assistant's tokens as the only targets, the template in the run and in its Hugging Face
export, and the refusals of bad data and settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import CHAT, chat_file, fine_tune
from scratchformer.data.chat import DEFAULT_TEMPLATE
from scratchformer.nn.loss import IGNORE_INDEX
from scratchformer.run import export_hf, load_run


def test_only_the_assistants_turns_are_targets(sft_run: Path) -> None:
    task, _ = load_run(sft_run)
    assert task.chat_template == DEFAULT_TEMPLATE
    assert (sft_run / "chat_template.jinja").read_text() == DEFAULT_TEMPLATE
    tokenizer = task.tokenizer()
    learnt = [
        tokenizer.decode([t for t in example.targets if t != IGNORE_INDEX], skip_special=False)
        for example in task.examples("train")
    ]
    assert learnt == [
        "To be, or not to be.</s>",
        "In the mind to suffer.</s>The slings and arrows.</s>",
    ]


def test_a_template_whose_turns_do_not_end_with_eos_is_warned_of(sft_run: Path) -> None:
    task, _ = load_run(sft_run)
    task.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    with pytest.warns(UserWarning, match=r"turns with \['.'\], not with the eos token \['</s>'\]"):
        task.encode(task.read("train"))


def test_the_hugging_face_export_masks_as_we_do(sft_run: Path, tmp_path: Path) -> None:
    """``transformers`` reads the template from the export and, by its ``{% generation %}``
    marks, finds the assistant's tokens the task learnt."""
    transformers = pytest.importorskip("transformers")
    export_hf(sft_run, tmp_path / "hf")
    assert json.loads((tmp_path / "hf/tokenizer_config.json").read_text())["chat_template"] == (
        DEFAULT_TEMPLATE
    )
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    task, _ = load_run(sft_run)
    for conversation, example in zip(CHAT, task.examples("train"), strict=True):
        marked = theirs.apply_chat_template(
            conversation, return_dict=True, return_assistant_tokens_mask=True
        )
        assert marked["input_ids"][:-1] == example.ids
        ids, mask = marked["input_ids"], marked["assistant_masks"]
        learnt = [t if m else IGNORE_INDEX for t, m in zip(ids, mask, strict=True)]
        assert learnt[1:] == example.targets


def test_bad_data_and_settings_are_refused_in_one_line(lm_run: Path, tmp_path: Path, capsys):
    start = f"train.init_from='{lm_run}'"
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({"messages": CHAT[0]}) + '\n{"messages": [}\n')
    refusing = tmp_path / "template.jinja"
    refusing.write_text("{{ raise_exception('one turn only') if messages | length > 3 }}")
    cases = [
        (broken, [start], f"{broken}:2: not valid JSON"),
        (chat_file(tmp_path / "ok.jsonl"), [], "set train.init_from to a run"),
        (tmp_path / "ok.jsonl", [start, f"data.chat.template='{refusing}'"], "ok.jsonl:2: the"),
        (tmp_path / "ok.jsonl", [start, "data.chat.template='missing.jinja'"], "missing.jinja"),
    ]
    for number, (data, settings, message) in enumerate(cases):
        capsys.readouterr()
        assert fine_tune(tmp_path / f"run{number}", data, *settings) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


def test_its_attention_is_that_of_a_language_model(sft_run: Path) -> None:
    task, model = load_run(sft_run)
    weights, labels = task.attention(model, "to be or not")
    tokens = len(task.tokenizer().encode("to be or not"))
    assert weights["decoder"][0].shape[-2:] == (tokens, tokens)
    assert labels["decoder"][0] == task.tokenizer().labels(task.tokenizer().encode("to be or not"))
