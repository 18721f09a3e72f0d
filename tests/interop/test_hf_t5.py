"""T5 checkpoints (v1.0: ReLU, tied head scaled; v1.1: gated GELU, a head of its own) in our
encoder-decoder: logits, greedy decoding and beam search against ``transformers`` (with and
without the cache), the export round trip, and models that are not T5's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file

from helpers import RECIPES, T5_STYLE, run, set_options, tiny_config
from scratchformer import build_model, from_pretrained, save_pretrained
from scratchformer.cli import main
from scratchformer.data.tokenizer import Tokenizer
from scratchformer.inference import CompiledModel, beam_search, greedy_decode
from scratchformer.run import import_hf, load_run

PAD, EOS = 0, 1  # T5's: the decoder starts from the pad id
VERSIONS = {
    # weights drawn 4 times wider than T5's, so that greedy decoding does not repeat a token
    "v1.0": dict(feed_forward_proj="relu", tie_word_embeddings=True, initializer_factor=4.0),
    # T5's widths (its random head varies the tokens enough): gelu_new, written out in
    # transformers, differs from PyTorch's tanh GELU by float32 rounding, which wider weights
    # would carry past 1e-4 in logits of tens
    "v1.1": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}


def tiny_t5(version: str, num_layers: int = 2) -> transformers.T5ForConditionalGeneration:
    """A random ``T5ForConditionalGeneration`` of the tiny sizes; v1.1's head untied (which
    ``transformers`` 5 leaves tied whatever ``tie_word_embeddings`` says)."""
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=200,
        d_model=64,
        d_kv=16,
        d_ff=96,
        num_layers=num_layers,
        num_heads=4,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=PAD,
        **VERSIONS[version],
    )
    model = transformers.T5ForConditionalGeneration(config)
    if not config.scale_decoder_outputs:
        model.lm_head.weight = torch.nn.Parameter(torch.randn(200, 64))
    return model.eval()


@pytest.fixture(scope="module", params=list(VERSIONS))
def checkpoint(request, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp(f"tiny-t5-{request.param}")
    tiny_t5(request.param).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def theirs(checkpoint: Path):
    return transformers.T5ForConditionalGeneration.from_pretrained(checkpoint).eval()


@pytest.fixture(scope="module")
def ours(checkpoint: Path):
    with pytest.warns(UserWarning, match="no tokenizer.json"):
        model, tokenizer = from_pretrained(checkpoint)
    assert tokenizer is None
    return model


def sources() -> tuple[torch.Tensor, torch.Tensor]:
    """Three sources, one padded, longer than the relative bias's max_distance."""
    torch.manual_seed(1)
    ids = torch.randint(2, 200, (3, 150))
    mask = torch.ones(3, 150, dtype=torch.long)
    mask[1, 90:] = 0
    return ids, mask


def test_config_is_the_versions_layout(ours, theirs) -> None:
    config = ours.config
    assert (config.arch, config.norm, config.positional) == ("seq2seq", "rms", "relative")
    assert (config.scale_attention, config.scale_embedding, config.bias) == (False, False, False)
    assert (config.relative_buckets, config.relative_max_distance) == (32, 128)
    v1_0 = theirs.config.scale_decoder_outputs
    assert (config.gated, config.activation) == ((False, "relu") if v1_0 else (True, "gelu_tanh"))
    assert config.tie_output == config.scale_output == v1_0
    assert (ours.lm_head.weight is ours.tgt_embedding.tokens.weight) == v1_0
    assert ours.src_embedding is ours.tgt_embedding


def test_logits_match_transformers(ours, theirs) -> None:
    src, mask = sources()
    tgt = torch.randint(0, 200, (3, 140))  # decoder distances past max_distance too
    with torch.no_grad():
        mine = ours(src, tgt, src_mask=mask.bool()).logits
        reference = theirs(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    assert (mine - reference).abs().max() < 1e-4


def their_tokens(generated: torch.Tensor) -> list[list[int]]:
    """``generate``'s rows without the start token, and cut at eos (which ours leave out)."""
    rows = []
    for row in generated[:, 1:].tolist():
        rows.append(row[: row.index(EOS)] if EOS in row else row)
    return rows


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_decoding_matches_transformers(ours, theirs, use_cache: bool) -> None:
    src, mask = sources()
    options = dict(bos_id=PAD, eos_id=EOS, max_len=40, use_cache=use_cache)
    mine = greedy_decode(ours, src, mask.bool(), **options)
    reference = theirs.generate(
        input_ids=src,
        attention_mask=mask,
        max_new_tokens=40,
        do_sample=False,
        num_beams=1,
        use_cache=use_cache,
    )
    assert mine == their_tokens(reference)
    assert any(len(row) == 40 and len(set(row)) > 5 for row in mine)  # not one token repeated


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_search_matches_transformers(ours, theirs, use_cache: bool) -> None:
    """Four beams, no length penalty (ours divides by ``((5 + len) / 6) ** alpha``,
    Hugging Face by ``len ** alpha``: the same ranking at 0)."""
    src, mask = sources()
    options = dict(beam_size=4, max_len=20, length_penalty=0.0, use_cache=use_cache)
    mine = beam_search(ours, src, mask.bool(), bos_id=PAD, eos_id=EOS, **options)
    reference = theirs.generate(
        input_ids=src,
        attention_mask=mask,
        max_new_tokens=20,
        do_sample=False,
        num_beams=4,
        length_penalty=0.0,
        early_stopping=True,
        use_cache=use_cache,
    )
    assert [hypotheses[0].tokens for hypotheses in mine] == their_tokens(reference)


def test_compiled_greedy_decoding_finds_the_eager_tokens(tmp_path: Path) -> None:
    """Through a ``CompiledModel`` the stacks compute the relative bias inside the compiled
    graphs, the cache's length varying from step to step (v1.0: the output scale too).
    (One version, one layer a stack: compiling is slow.)"""
    tiny_t5("v1.0", num_layers=1).save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="no tokenizer.json"):
        model, _ = from_pretrained(tmp_path)
    src, mask = sources()
    options = dict(bos_id=PAD, eos_id=EOS, max_len=12)
    expected = greedy_decode(model, src, mask.bool(), **options)
    assert greedy_decode(CompiledModel(model), src, mask.bool(), **options) == expected


def test_export_round_trip(ours, theirs, tmp_path: Path) -> None:
    save_pretrained(ours, tmp_path / "hf")
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (written["model_type"], written["d_kv"]) == ("t5", 16)
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf").eval()
    src, mask = sources()
    tgt = torch.randint(0, 200, (3, 30))
    with torch.no_grad():
        mine = ours(src, tgt, src_mask=mask.bool()).logits
        reference = theirs(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        again = reloaded(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    assert (again - mine).abs().max() < 1e-4 and (again - reference).abs().max() < 1e-4
    tied = reloaded.lm_head.weight.data_ptr() == reloaded.shared.weight.data_ptr()
    assert tied == ours.config.tie_output


def test_a_from_scratch_t5_exports_and_loads(tmp_path: Path) -> None:
    """Our own T5 v1.1 layout (gated GELU, an untied head), trained by us, in transformers."""
    torch.manual_seed(0)
    v1_1 = dict(gated=True, activation="gelu_tanh", tie_output=False, scale_output=False)
    config = tiny_config(**T5_STYLE | v1_1, n_decoder_layers=3)
    model = build_model(config).eval()
    save_pretrained(model, tmp_path / "hf")
    theirs = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf").eval()
    assert theirs.config.num_decoder_layers == 3
    src, tgt = torch.randint(0, 29, (2, 11)), torch.randint(0, 29, (2, 7))
    with torch.no_grad():
        mine = model(src, tgt).logits
        reference = theirs(input_ids=src, decoder_input_ids=tgt).logits
    assert (mine - reference).abs().max() < 1e-4


@pytest.mark.parametrize(
    ("decoder_start", "specials", "start"),
    [("bos", ("pad", "unk", "bos", "eos"), 2), ("pad", ("pad", "unk", "eos"), 0)],
)
def test_decoder_start_token_id_is_the_id_of_the_models_decoder_start(
    decoder_start: str, specials: tuple[str, ...], start: int, tmp_path: Path
) -> None:
    """Our translation task's decoders start from bos; T5's tokenizers have none, and its
    decoders start from pad."""
    tokenizer = Tokenizer.train("char", ["a small text"], 29, specials)
    model = build_model(tiny_config(**T5_STYLE, decoder_start=decoder_start))
    save_pretrained(model, tmp_path, tokenizer)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["decoder_start_token_id"] == start
    assert (written["pad_token_id"], written["eos_token_id"]) == (0, len(specials) - 1)
    assert from_pretrained(tmp_path)[0].config.decoder_start == decoder_start


def test_a_tokenizer_without_the_decoder_start_token_is_not_exported(tmp_path: Path) -> None:
    tokenizer = Tokenizer.train("char", ["a small text"], 29, ("pad", "unk", "eos"))
    with pytest.raises(ValueError, match="decoder_start='bos', but the tokenizer has no bos"):
        save_pretrained(build_model(tiny_config(**T5_STYLE)), tmp_path / "hf", tokenizer)
    assert not (tmp_path / "hf").exists()


def test_a_decoder_start_token_id_of_no_known_role_is_named(checkpoint: Path, tmp_path) -> None:
    for name in ("model.safetensors", "config.json"):
        (tmp_path / name).write_bytes((checkpoint / name).read_bytes())
    hf = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(hf | {"decoder_start_token_id": 5}))
    with pytest.raises(ValueError, match="decoder_start_token_id=5 is not supported"):
        from_pretrained(tmp_path)
    del hf["decoder_start_token_id"]
    (tmp_path / "config.json").write_text(json.dumps(hf))
    with pytest.warns(UserWarning, match="no tokenizer.json"):
        assert from_pretrained(tmp_path)[0].config.decoder_start == "pad"


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (dict(scale_attention=True), "scale_attention=True (needs False)"),
        (dict(positional="sinusoidal"), "positional='sinusoidal' (needs 'relative')"),
        (dict(attention_dropout=0.0), "dropout=0.1 and attention_dropout=0.0 (need one value"),
    ],
)
def test_models_t5_cannot_express_are_not_exported(overrides, fragment, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot export as t5") as error:
        save_pretrained(build_model(tiny_config(**T5_STYLE | overrides)), tmp_path / "hf")
    assert fragment in str(error.value)
    assert not (tmp_path / "hf").exists()


def test_a_head_width_other_than_d_model_over_heads_is_named(checkpoint: Path, tmp_path) -> None:
    for name in ("model.safetensors", "config.json"):
        (tmp_path / name).write_bytes((checkpoint / name).read_bytes())
    hf = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(hf | {"d_kv": 32}))
    with pytest.raises(ValueError, match="d_kv=32 is not supported"):
        from_pretrained(tmp_path)


PREFIX = "translate English to German: "
SENTENCES = ["the quick brown fox", "a man in a red shirt sits on a bench", "Hello, world!"]


@pytest.fixture(scope="module")
def t5_dir(checkpoint: Path, t5_tokenizer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint with a tokenizer laid out as T5's."""
    directory = tmp_path_factory.mktemp("t5-with-tokenizer")
    for name in ("model.safetensors", "config.json"):
        (directory / name).write_bytes((checkpoint / name).read_bytes())
    t5_tokenizer.save(str(directory / "tokenizer.json"))
    return directory


@pytest.fixture(scope="module")
def t5_run(t5_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint imported as a translation run with T5's task prefix."""
    run_dir = tmp_path_factory.mktemp("runs") / "t5"
    prefix = f"data.translation.source_prefix='{PREFIX}'"
    assert main(["--quiet", "import-hf", str(t5_dir), "--out", str(run_dir), "--set", prefix]) == 0
    return run_dir


def their_translations(theirs, t5_tokenizer, beams: int) -> list[str]:
    """``generate``'s output for each sentence alone, with T5's task prefix, up to 50 tokens
    more than the source (our decoders' default), detokenised by ``transformers``."""
    reader = transformers.PreTrainedTokenizerFast(
        tokenizer_object=t5_tokenizer,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
    )
    search = dict(num_beams=beams, length_penalty=0.0, early_stopping=True) if beams > 1 else {}
    outputs = []
    for sentence in SENTENCES:
        source = reader(PREFIX + sentence, return_tensors="pt")
        assert source.input_ids[0, -1] == EOS
        generated = theirs.generate(
            **source,
            max_new_tokens=source.input_ids.shape[1] + 50,
            do_sample=False,
            **search,
        )
        outputs.append(reader.decode(generated[0], skip_special_tokens=True))
    return outputs


@pytest.mark.parametrize("beams", [1, 4])
def test_an_imported_t5_translates_as_transformers_generates(
    t5_run: Path, theirs, t5_tokenizer, beams: int, capsys, monkeypatch
) -> None:
    """``scratchformer translate`` of the imported run (the sentences batched together)
    against ``generate`` (one at a time): the same text, greedy and with 4 beams."""
    recipe = json.loads((t5_run / "config.json").read_text())
    assert recipe["task"] == "translation" and recipe["model"]["decoder_start"] == "pad"
    assert recipe["data"]["translation"]["source_prefix"] == PREFIX
    options = ["--beam", str(beams), "--length-penalty", "0"]
    status, out, err = run(
        capsys, monkeypatch, "\n".join(SENTENCES), "translate", str(t5_run), *options
    )
    assert status == 0, err
    assert out == their_translations(theirs, t5_tokenizer, beams)
    assert all(out) and len(set(out)) == len(out)


def test_an_imported_t5_exports_as_it_came(t5_run: Path, checkpoint: Path, tmp_path) -> None:
    """export-hf of the imported run: T5's config values (the decoder starting from pad)
    and the checkpoint's weights; imported again, the same run."""
    assert main(["--quiet", "export-hf", str(t5_run), "--out", str(tmp_path / "hf")]) == 0
    original = json.loads((checkpoint / "config.json").read_text())
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    keys = ("decoder_start_token_id", "pad_token_id", "eos_token_id", "d_model", "d_kv", "d_ff")
    keys += ("num_layers", "num_heads", "dense_act_fn", "is_gated_act", "vocab_size")
    assert {key: written[key] for key in keys} == {key: original[key] for key in keys}
    assert written["decoder_start_token_id"] == PAD
    exported = load_file(tmp_path / "hf" / "model.safetensors")
    weights = load_file(checkpoint / "model.safetensors")
    assert exported.keys() <= weights.keys()
    assert all(torch.equal(exported[name], weights[name]) for name in exported)
    assert main(["--quiet", "import-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 0
    again = json.loads((tmp_path / "run" / "config.json").read_text())
    assert again["model"] == json.loads((t5_run / "config.json").read_text())["model"]


def test_an_imported_run_takes_data_and_train_settings_only(checkpoint: Path, tmp_path) -> None:
    with pytest.raises(ValueError, match=r"takes data.\* and train.\* settings"):
        import_hf(checkpoint, tmp_path / "run", ["model.d_model=8"])
    assert not (tmp_path / "run").exists()


def test_a_translation_fine_tune_starts_from_a_t5_checkpoint(t5_dir: Path, tmp_path) -> None:
    """The fine-tune keeps T5's tokenizer, which has no bos token, and its decoder's start."""
    source, target = tmp_path / "source.txt", tmp_path / "target.txt"
    source.write_text("the quick brown fox\na man sits\n" * 4)
    target.write_text("der schnelle braune Fuchs\nein Mann sitzt\n" * 4)
    files = f"['{source}', '{target}']"
    options = [
        f"train.init_from='{t5_dir}'",
        "data.dataset=none",
        f"data.train={files}",
        f"data.val={files}",
        f"data.translation.source_prefix='{PREFIX}'",
        "train.max_steps=1",
        "train.eval_every=1",
        "train.max_tokens=none",
        "train.batch_size=4",
        "train.precision='fp32'",
    ]
    recipe, out = str(RECIPES / "multi30k-de-en-pretrained.toml"), str(tmp_path / "run")
    assert main(["--quiet", "train", recipe, "--out", out, *set_options(options)]) == 0
    task, model = load_run(tmp_path / "run")
    assert task.recipe.model.decoder_start == "pad" and task.tokenizer().bos_id is None
    assert task.start_id() == PAD and len(task.translate(model, ["a man"], beam_size=2)) == 1
