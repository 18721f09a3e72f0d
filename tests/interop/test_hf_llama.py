"""Llama, Qwen2 and Mistral checkpoints in our decoder-only LM: logits and greedy decoding
against ``transformers`` (with and without the cache), sharded weights, the tokenizers,
the round trip through a run directory, and checkpoints that do not fit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers

from helpers import LATENT, LLAMA_STYLE, tiny_config
from scratchformer import build_model, from_pretrained, save_pretrained
from scratchformer.cli import main
from scratchformer.inference import generate

TEXTS = ["the quick brown fox", "Hello, world! Ça va?", "lazy dogs <s> jump"]


@pytest.fixture(scope="module")
def ours(tiny_llama_family: Path):
    return from_pretrained(tiny_llama_family)


@pytest.fixture(scope="module")
def theirs(tiny_llama_family: Path):
    return transformers.AutoModelForCausalLM.from_pretrained(tiny_llama_family).eval()


def test_config_is_the_familys_layout(ours, tiny_llama_family: Path) -> None:
    config = ours[0].config
    assert (config.arch, config.norm, config.gated, config.activation) == (
        "decoder",
        "rms",
        True,
        "silu",
    )
    assert (config.positional, config.bias, config.dropout) == ("rotary", False, 0.0)
    kind = json.loads((tiny_llama_family / "config.json").read_text())["model_type"]
    expected = {
        "llama": dict(n_kv_heads=2, rope_scaling="llama3", rope_theta=500000.0, tie_output=False),
        "qwen2": dict(n_kv_heads=1, qkv_bias=True, rope_theta=1000000.0, tie_output=True),
        "mistral": dict(n_kv_heads=2, sliding_window=8, rope_scaling="linear", rope_factor=2.0),
    }[kind]
    assert {name: getattr(config, name) for name in expected} == expected
    tied = ours[0].lm_head.weight is ours[0].embedding.tokens.weight
    assert tied == config.tie_output


def test_logits_match_transformers(ours, theirs) -> None:
    ids = torch.randint(0, ours[0].config.vocab_size, (3, 50))
    with torch.no_grad():
        assert (ours[0](ids).logits - theirs(ids).logits).abs().max() < 1e-4


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_generation_matches_transformers(ours, theirs, use_cache: bool) -> None:
    model, tokenizer = ours
    prompt = tokenizer.encode("the quick brown")
    mine = generate(model, [prompt], max_new_tokens=40, greedy=True, use_cache=use_cache)[0]
    reference = theirs.generate(
        torch.tensor([prompt]),
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        max_new_tokens=40,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
        use_cache=use_cache,
    )[0, len(prompt) :].tolist()
    assert len(mine) == 40 and len(set(mine)) > 5  # not a single repeated token
    assert mine == reference


def test_tokenizer_matches_transformers(ours, tiny_llama_family: Path) -> None:
    tokenizer = ours[1]
    reference = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tiny_llama_family / "tokenizer.json")
    )
    for text in TEXTS[:2]:  # "Ç" is not in the training text: bytes (Llama) or byte-level
        ids = tokenizer.encode(text)
        assert ids == reference(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text == reference.decode(ids)
    assert tokenizer.eos_id is not None


def test_a_sharded_checkpoint_reads_as_one(llama_checkpoint, tmp_path: Path) -> None:
    directory = llama_checkpoint("llama", tmp_path / "sharded", max_shard_size="40KB")
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    assert not (directory / "model.safetensors").exists()
    model, _ = from_pretrained(directory)
    whole, _ = from_pretrained(llama_checkpoint("llama", tmp_path / "whole"))
    ids = torch.randint(0, model.config.vocab_size, (2, 20))
    torch.testing.assert_close(model(ids).logits, whole(ids).logits, atol=0, rtol=0)
    shard = sorted(set(index["weight_map"].values()))[1]
    (directory / shard).unlink()
    with pytest.raises(FileNotFoundError, match=f"{shard} not found"):
        from_pretrained(directory)


def test_round_trip_through_a_run_directory(
    ours, tiny_llama_family: Path, tmp_path: Path, capsys
) -> None:
    run_dir, exported = tmp_path / "run", tmp_path / "hf"
    assert main(["--quiet", "import-hf", str(tiny_llama_family), "--out", str(run_dir)]) == 0
    capsys.readouterr()
    generating = ["generate", str(run_dir), "--prompt", "the", "--greedy", "--max-new-tokens", "9"]
    assert main(["--quiet", *generating]) == 0
    assert capsys.readouterr().out.startswith("the")  # random bytes may follow, \x1d too
    assert main(["export-hf", str(run_dir), "--out", str(exported)]) == 0
    hf = json.loads((exported / "config.json").read_text())
    original = json.loads((tiny_llama_family / "config.json").read_text())
    assert hf["architectures"] == original["architectures"]
    ids = torch.randint(0, ours[0].config.vocab_size, (2, 30))
    with torch.no_grad():
        mine = ours[0](ids)
        lm = transformers.AutoModelForCausalLM.from_pretrained(exported).eval()(ids)
    assert (mine.logits - lm.logits).abs().max() < 1e-4
    loaded, tokenizer = from_pretrained(exported)
    assert tokenizer.specials == ours[1].specials
    torch.testing.assert_close(loaded(ids).logits, mine.logits)


def test_a_config_asking_for_terabytes_is_an_error_before_allocating(
    tiny_llama_family: Path, tmp_path: Path, monkeypatch
) -> None:
    """Past the machine's ceiling (``test_config.py``), the weights' sizes are checked
    against the config's on the meta device."""
    monkeypatch.setenv("SCRATCHFORMER_MAX_PARAMETERS", str(10**18))  # past the ceiling
    directory = tmp_path / "huge"
    shutil.copytree(tiny_llama_family, directory)
    hf = json.loads((directory / "config.json").read_text())
    hf |= {
        "vocab_size": 10**12,
        "hidden_size": 2**14,
        "num_attention_heads": 2**7,
        "head_dim": 2**7,
    }
    (directory / "config.json").write_text(json.dumps(hf))
    with pytest.raises(ValueError, match=r"does not fit its config\.json") as error:
        from_pretrained(directory)
    assert "model.embed_tokens.weight is (" in str(error.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, "rope_type='yarn'"),
        ({"head_dim": 32}, "head_dim=32 is not supported"),
        ({"attention_bias": True}, "attention_bias=True is not supported"),
        ({"hidden_act": "tanh"}, "hidden_act='tanh' is not supported"),
    ],
)
def test_unsupported_llama_settings_are_named(
    change: dict, message: str, llama_checkpoint, tmp_path: Path
) -> None:
    directory = llama_checkpoint("llama", tmp_path)
    hf = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps(hf | change))
    with pytest.raises(ValueError, match=message):
        from_pretrained(directory)


@pytest.mark.parametrize(
    ("overrides", "model_type"),
    [
        (dict(n_kv_heads=2, tie_output=False), "llama"),
        (dict(qkv_bias=True), "qwen2"),
        (dict(sliding_window=5, rope_scaling="linear", rope_factor=2.0), "mistral"),
    ],
)
def test_our_llama_family_models_export_to_transformers(
    overrides: dict, model_type: str, tmp_path: Path
) -> None:
    model = build_model(tiny_config(**LLAMA_STYLE | overrides)).eval()
    save_pretrained(model, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == model_type
    ids = torch.randint(0, model.config.vocab_size, (2, 12))
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert (model(ids).logits - theirs(ids).logits).abs().max() < 1e-4


def test_a_llama_with_layer_norm_is_not_exported(tmp_path: Path) -> None:
    model = build_model(tiny_config(**LLAMA_STYLE | dict(norm="layer")))
    with pytest.raises(ValueError, match=r"cannot export as llama: norm='layer' \(needs 'rms'\)"):
        save_pretrained(model, tmp_path / "hf")


def test_a_llama_with_latent_attention_is_not_exported(tmp_path: Path) -> None:
    """No family writes multi-head latent attention: refused in one line that names it."""
    model = build_model(tiny_config(**LLAMA_STYLE | LATENT))
    message = r"^cannot export as llama: attention='latent' \(needs 'multi_head'\)$"
    with pytest.raises(ValueError, match=message):
        save_pretrained(model, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
