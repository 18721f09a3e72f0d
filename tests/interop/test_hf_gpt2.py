"""GPT-2 checkpoints in our decoder-only LM: logits and greedy decoding against
``transformers``, the round trip through a run directory, and export errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers

from helpers import RECIPES, TINY_MODEL, set_options, snapshot, tiny_config
from scratchformer import build_model, from_pretrained, save_pretrained
from scratchformer.cli import main
from scratchformer.inference import generate

TEXTS = ["the quick brown fox", "Hello, world! Ça va?", "lazy dogs <|endoftext|> jump"]


@pytest.fixture(scope="module")
def ours(tiny_gpt2: Path):
    return from_pretrained(tiny_gpt2)


@pytest.fixture(scope="module")
def theirs(tiny_gpt2: Path):
    return transformers.GPT2LMHeadModel.from_pretrained(tiny_gpt2).eval()


def test_config_is_gpt2s_layout(ours) -> None:
    config = ours[0].config
    assert (config.arch, config.norm_first, config.use_final_norm) == ("decoder", True, True)
    assert (config.activation, config.positional, config.scale_embedding) == (
        "gelu_tanh",
        "learned",
        False,
    )
    assert config.tie_output and ours[0].lm_head.weight is ours[0].embedding.tokens.weight


def test_logits_match_transformers(ours, theirs) -> None:
    ids = torch.randint(0, ours[0].config.vocab_size, (3, 50))
    with torch.no_grad():
        assert (ours[0](ids).logits - theirs(ids).logits).abs().max() < 1e-4


def test_greedy_generation_matches_transformers(ours, theirs) -> None:
    model, tokenizer = ours
    prompt = tokenizer.encode("the quick brown")
    mine = generate(model, [prompt], max_new_tokens=40, greedy=True)[0]
    reference = theirs.generate(
        torch.tensor([prompt]),
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        max_new_tokens=40,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )[0, len(prompt) :].tolist()
    assert len(mine) == 40 and len(set(mine)) > 5  # not a single repeated token
    assert mine == reference


def test_tokenizer_recognises_endoftext_and_matches_transformers(ours, tiny_gpt2: Path) -> None:
    tokenizer = ours[1]
    assert tokenizer.bos_id == tokenizer.eos_id == tokenizer.unk_id == 0
    reference = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tiny_gpt2 / "tokenizer.json")
    )
    for text in TEXTS[:2]:
        assert tokenizer.encode(text) == reference(text)["input_ids"]
        assert tokenizer.decode(tokenizer.encode(text)) == text
    assert 0 not in tokenizer.encode(TEXTS[2])  # ours: a special's text stays plain text


def test_round_trip_through_a_run_directory(ours, tiny_gpt2: Path, tmp_path: Path, capsys) -> None:
    run_dir, exported = tmp_path / "run", tmp_path / "hf"
    assert main(["import-hf", str(tiny_gpt2), "--out", str(run_dir)]) == 0
    generating = ["generate", str(run_dir), "--prompt", "the", "--greedy", "--max-new-tokens", "9"]
    assert main(["--quiet", *generating]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("the")
    assert main(["export-hf", str(run_dir), "--out", str(exported)]) == 0
    ids = torch.randint(0, ours[0].config.vocab_size, (2, 30))
    with torch.no_grad():
        mine = ours[0](ids)
        lm = transformers.AutoModelForCausalLM.from_pretrained(exported).eval()(ids)
        base = transformers.AutoModel.from_pretrained(exported).eval()(ids)
    assert (mine.logits - lm.logits).abs().max() < 1e-4
    assert (mine.last_hidden_state - base.last_hidden_state).abs().max() < 1e-4
    loaded, tokenizer = from_pretrained(exported)
    assert tokenizer.specials == ours[1].specials
    torch.testing.assert_close(loaded(ids).logits, mine.logits)


def test_no_run_directory_is_written_over(tiny_gpt2: Path, tmp_path: Path, capsys) -> None:
    run_dir, other = tmp_path / "run", tmp_path / "other"
    assert main(["import-hf", str(tiny_gpt2), "--out", str(run_dir)]) == 0
    assert main(["import-hf", str(tiny_gpt2), "--out", str(other)]) == 0
    before = snapshot(tmp_path)
    capsys.readouterr()
    for out in (run_dir, other):
        assert main(["export-hf", str(run_dir), "--out", str(out)]) == 2
        assert (
            f"{out} is a run directory: write the checkpoint elsewhere" in capsys.readouterr().err
        )
    assert main(["import-hf", str(tiny_gpt2), "--out", str(tmp_path)]) == 2
    assert f"{tmp_path} is not empty (other, run); choose" in capsys.readouterr().err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        (
            dict(arch="decoder", norm_first=False, positional="sinusoidal"),
            ["cannot export as gpt2", "norm_first=False (needs True)", "positional='sinusoidal'"],
        ),
        (dict(arch="encoder", type_vocab_size=0), ["cannot export as bert", "type_vocab_size=0"]),
        (dict(arch="seq2seq"), ["cannot export as t5", "positional='sinusoidal'"]),
    ],
)
def test_incompatible_models_are_not_exported(overrides, fragments, tmp_path: Path) -> None:
    config = tiny_config(**overrides)
    with pytest.raises(ValueError) as error:
        save_pretrained(build_model(config), tmp_path / "hf")
    assert all(fragment in str(error.value) for fragment in fragments)
    assert not (tmp_path / "hf").exists()


def test_export_of_an_incompatible_run_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "copy"
    options = [*TINY_MODEL, "train.max_steps=1"]
    options += ["data.synthetic.train_size=50", "data.synthetic.val_size=10"]
    args = ["--quiet", "train", str(RECIPES / "copy.toml"), "--out", str(run_dir)]
    assert main([*args, *set_options(options)]) == 0
    capsys.readouterr()
    assert main(["export-hf", str(run_dir), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot export as t5: " in err


@pytest.mark.parametrize("kept_as", ["tokenizer_config.json", "chat_template.jinja"])
def test_import_keeps_the_checkpoints_chat_template(
    tiny_gpt2: Path, tmp_path: Path, kept_as
) -> None:
    checkpoint, run_dir = tmp_path / "hf", tmp_path / "run"
    shutil.copytree(tiny_gpt2, checkpoint)
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    if kept_as == "chat_template.jinja":
        (checkpoint / kept_as).write_text(template)
    else:
        entries = [{"name": "tool_use", "template": "x"}, {"name": "default", "template": template}]
        (checkpoint / kept_as).write_text(json.dumps({"chat_template": entries}))
    assert main(["--quiet", "import-hf", str(checkpoint), "--out", str(run_dir)]) == 0
    assert (run_dir / "chat_template.jinja").read_text() == template


def test_a_runs_chat_template_is_quantized_with_it_and_overwritten_with_it(
    tiny_gpt2: Path, tmp_path: Path
) -> None:
    checkpoint, run_dir, int8 = tmp_path / "hf", tmp_path / "run", tmp_path / "int8"
    shutil.copytree(tiny_gpt2, checkpoint)
    (checkpoint / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    assert main(["--quiet", "import-hf", str(checkpoint), "--out", str(run_dir)]) == 0
    assert main(["--quiet", "quantize", str(run_dir), "--out", str(int8)]) == 0
    assert (int8 / "chat_template.jinja").read_text() == "{{ messages[0]['content'] }}"
    settings = [*TINY_MODEL, "train.max_steps=1", "data.synthetic.train_size=50"]
    args = ["--quiet", "train", str(RECIPES / "copy.toml"), "--out", str(run_dir), "--overwrite"]
    assert main([*args, *set_options(settings)]) == 0
    assert not (run_dir / "chat_template.jinja").exists()
