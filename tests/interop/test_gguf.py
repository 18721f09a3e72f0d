"""GGUF files for llama.cpp (``export-gguf``), checked by running them in llama.cpp itself
(``llama-cpp-python``): tokenization, logits and greedy decoding of a trained Llama-style
and GPT-2-style run against ours; every setting folded into the weights, on random models;
q8_0's agreement with our greedy tokens; and the refusals, from Python and the CLI."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import LATENT, LLAMA_STYLE, RECIPES, set_options, train
from scratchformer import ModelConfig, build_model
from scratchformer.cli import main
from scratchformer.data.tokenizer import Tokenizer
from scratchformer.inference import generate
from scratchformer.run import export_gguf, load_run

gguf = pytest.importorskip("gguf")  # the export extra
llama_cpp = pytest.importorskip("llama_cpp")

from scratchformer.interop.gguf import interleave_heads, save_gguf  # noqa: E402 (needs gguf)

TEXT = (
    "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer\n"
    "the slings and arrows of outrageous fortune, or to take arms against a sea of troubles.\n"
    "I'll say it's 12 o'clock; they've 3,500 ducats -- and we'd paid 42.5% more in 1599!\n"
    "ROMEO: But soft, what light through yonder window breaks? It is the east.\n"
    "JULIET: O Romeo, Romeo, wherefore art thou Romeo? Deny thy father.\n"
) * 12
VARIED = (
    "Hello, world! It's 2024 -- naïve café, Ça va? They'll've DON'T 'quoted' x=1+2*(3/4)\n"
    "\n\n   multiple   spaces\tand\ttabs\r\nemoji 🤖🎉, 日本語のテキスト, Ελληνικά, ﬁne ligatures "
    "<unk></s> specials as text   \n  trailing spaces   "
)
"""A text of every kind of character and spacing GPT-2's regex splits: contractions,
digits, punctuation runs, runs of spaces, tabs and line breaks, letters of other scripts,
emoji (bytes no merge covers), the special tokens' strings (plain text to both)."""
PROMPTS = [
    "To be, or not",
    "ROMEO: But soft",
    "the slings and",
    "I'll say it's",
    "JULIET: O",
    "whether 'tis nobler",
    "they've 3,500",
    "It is the",
]
NEW_TOKENS = 40
LLAMA_TOLERANCE = 1e-4
"""Largest difference of a logit, ours against llama.cpp's, with f32 weights and an f32
cache: llama.cpp sums in other orders (and rounds its rotary angles otherwise), nothing
more."""
GPT2_TOLERANCE = 2e-2
"""The same for gpt2: llama.cpp's GELU (the tanh approximation, as ours) reads a table of
float16 inputs and outputs on the CPU (``GGML_GELU_FP16``), about 1e-3 relative a value."""
Q8_AGREEMENT = 0.95

TRAINING = [
    "data.dataset=none",
    "data.tokenizer=bpe",
    "data.vocab_size=320",
    "data.lm.block_size=32",
    "model.max_len=128",
    "model.n_layers=2",
    "train.max_steps=100",
    "train.eval_every=100",
    "train.batch_size=8",
]
STYLES = {
    "llama": ("shakespeare-llama.toml", ["model.n_kv_heads=2"]),
    "gpt2": (
        "shakespeare-char.toml",
        ["model.positional='learned'", "model.activation='gelu_tanh'"],
    ),
}
"""The two recipes, each as llama.cpp runs it: Llama-style as it is (grouped-query); the
char recipe's GPT-2 variant (learned positions, GELU's tanh form)."""


@pytest.fixture(scope="module")
def text_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gguf-text") / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


@pytest.fixture(scope="module", params=list(STYLES))
def trained(request, text_file: Path, tmp_path_factory: pytest.TempPathFactory):
    """A run of each style, trained for a few steps with a byte-level BPE of 320 tokens,
    and its f32 GGUF file."""
    recipe, settings = STYLES[request.param]
    directory = tmp_path_factory.mktemp(f"gguf-{request.param}")
    data = [f"data.train='{text_file}'", f"data.val='{text_file}'"]
    train(directory / "run", recipe, *data, *TRAINING, *settings)
    assert export_gguf(directory / "run", directory / "f32.gguf", "f32") == request.param
    task, model = load_run(directory / "run")
    return request.param, directory, task.tokenizer(), model


@contextlib.contextmanager
def llama(path: Path, n_ctx: int = 128) -> Iterator[object]:
    """llama.cpp on ``path``: all logits kept, an f32 key/value cache (its default, f16,
    would round what attention reads), two threads, quiet."""
    model = llama_cpp.Llama(
        model_path=str(path),
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_threads=2,
        n_threads_batch=2,
        logits_all=True,
        type_k=llama_cpp.GGML_TYPE_F32,
        type_v=llama_cpp.GGML_TYPE_F32,
        verbose=False,
    )
    try:
        yield model
    finally:
        model.close()


def their_logits(model, ids: list[int]) -> np.ndarray:
    """llama.cpp's logits at every one of ``ids``, read from the start."""
    model.reset()
    model.eval(ids)
    return np.array(model.scores[: len(ids)])


def their_greedy(model, prompt: list[int], new: int) -> list[int]:
    """llama.cpp's ``new`` greedy tokens after ``prompt`` (its own argmax, step by step
    through its cache)."""
    model.reset()
    model.eval(prompt)
    tokens = []
    for _ in range(new):
        token = int(np.argmax(model.scores[model.n_tokens - 1]))
        tokens.append(token)
        model.eval([token])
    return tokens


def our_logits(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def test_tokenization_is_ours(trained) -> None:
    _, directory, tokenizer, _ = trained
    with llama(directory / "f32.gguf") as model:
        for text in (VARIED, TEXT[:300], " leading space", "x", ""):
            ids = model.tokenize(text.encode("utf-8"), add_bos=False, special=False)
            assert ids == tokenizer.encode(text)
            assert model.detokenize(ids).decode("utf-8") == text
        assert len(tokenizer.encode(VARIED)) > 100  # the text is not one token a character
        assert model.token_eos() == tokenizer.eos_id
        assert model.n_vocab() == tokenizer.vocab_size


def test_logits_match_ours(trained) -> None:
    style, directory, tokenizer, ours = trained
    ids = tokenizer.encode(TEXT)[:100]
    with llama(directory / "f32.gguf") as model:
        difference = np.abs(their_logits(model, ids) - our_logits(ours, ids)).max()
    print(f"{style}: largest logit difference {difference:.2e}")
    assert difference < (LLAMA_TOLERANCE if style == "llama" else GPT2_TOLERANCE)


def test_greedy_tokens_match_ours_in_f32(trained) -> None:
    _, directory, tokenizer, ours = trained
    prompt = tokenizer.encode(PROMPTS[0])
    mine = generate(ours, [prompt], max_new_tokens=NEW_TOKENS, greedy=True)[0]
    assert len(mine) == NEW_TOKENS and len(set(mine)) > 5  # a text, not one token repeated
    with llama(directory / "f32.gguf") as model:
        assert their_greedy(model, prompt, NEW_TOKENS) == mine


@pytest.mark.parametrize("type", ["f16", "q8_0"])
def test_quantized_files_agree_with_our_greedy_tokens(trained, type: str) -> None:
    """Teacher-forced: each prompt followed by our 40 greedy tokens, read once by
    llama.cpp; its argmax at each of those positions against our token there."""
    style, directory, tokenizer, ours = trained
    path = directory / f"{type}.gguf"
    export_gguf(directory / "run", path, type)
    agree = total = 0
    with llama(path) as model:
        for text in PROMPTS:
            prompt = tokenizer.encode(text)
            mine = generate(ours, [prompt], max_new_tokens=NEW_TOKENS, greedy=True)[0]
            logits = their_logits(model, prompt + mine)
            theirs = logits[len(prompt) - 1 : -1].argmax(axis=-1)
            agree += int((theirs == np.array(mine)).sum())
            total += len(mine)
    print(f"{style} {type}: {agree}/{total} = {agree / total:.1%} of our greedy tokens")
    assert agree / total >= Q8_AGREEMENT
    reader = gguf.GGUFReader(path)
    kinds = {tensor.name: tensor.tensor_type.name for tensor in reader.tensors}
    assert kinds["token_embd.weight"] == type.upper()
    assert kinds["blk.0.ffn_norm.weight"] == "F32"
    assert path.stat().st_size < (directory / "f32.gguf").stat().st_size


# Every setting folded into the weights, on random models --------------------------------


@pytest.fixture(scope="module")
def tokenizer(text_file: Path) -> Tokenizer:
    return Tokenizer.train("bpe", [TEXT], 300, ("unk", "eos"))


LLAMA = {**LLAMA_STYLE, "n_layers": 2, "d_model": 32, "n_heads": 4, "d_ff": 64, "max_len": 64}
GPT2 = {
    **LLAMA,
    "norm": "layer",
    "gated": False,
    "activation": "gelu_tanh",
    "bias": True,
    "positional": "learned",
}
VARIANTS = {
    "llama, tied": {},
    "llama, untied, scaled embeddings, unscaled scores, biases, one kv head, segments": dict(
        tie_output=False,
        scale_embedding=True,
        scale_attention=False,
        bias=True,
        n_kv_heads=1,
        type_vocab_size=2,
    ),
    "llama, qkv biases only, theta 5e5, linear scaling": dict(
        qkv_bias=True, rope_theta=5e5, rope_scaling="linear", rope_factor=2.0
    ),
    "llama, llama3 scaling, output scale": dict(
        rope_scaling="llama3",
        rope_factor=8.0,
        rope_original_max_len=64,
        scale_output=True,
        layer_norm_eps=1e-6,
    ),
    "gpt2, tied": dict(GPT2),
    "gpt2, sinusoidal, no biases, qkv biases, two kv heads, scaled": dict(
        GPT2,
        positional="sinusoidal",
        bias=False,
        qkv_bias=True,
        n_kv_heads=2,
        scale_embedding=True,
        scale_attention=False,
        tie_output=False,
    ),
}


@pytest.mark.parametrize("fields", list(VARIANTS.values()), ids=list(VARIANTS))
@pytest.mark.parametrize("padding", [0, 3], ids=["vocab", "padded vocab"])
def test_every_setting_folds_exactly(fields, padding: int, tokenizer, tmp_path: Path) -> None:
    torch.manual_seed(1)
    config = ModelConfig(**{**LLAMA, **fields, "vocab_size": tokenizer.vocab_size + padding})
    model = build_model(config).eval()
    with torch.no_grad():  # biases and gains away from their zeros and ones
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    path = tmp_path / "model.gguf"
    save_gguf(model, tokenizer, path, "f32", "random")
    ids = tokenizer.encode(TEXT)[:60]
    with llama(path, n_ctx=64) as theirs:
        difference = np.abs(their_logits(theirs, ids) - our_logits(model, ids)).max()
        assert theirs.n_vocab() == config.vocab_size
    tolerance = LLAMA_TOLERANCE if config.norm == "rms" else GPT2_TOLERANCE
    print(f"largest logit difference {difference:.2e}")
    assert difference < tolerance
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]  # no temp file left


def test_interleaving_pairs_i_with_half_plus_i() -> None:
    rows = torch.arange(2 * 8).float()  # two heads of width 8
    assert interleave_heads(rows, 2).tolist() == [
        *(0, 4, 1, 5, 2, 6, 3, 7),
        *(8, 12, 9, 13, 10, 14, 11, 15),
    ]


# Refusals ------------------------------------------------------------------------------


REFUSED = {
    "post-LN": (dict(norm_first=False), "model.norm_first=False"),
    "rotary with LayerNorm": (dict(GPT2, positional="rotary"), "model.positional='rotary'"),
    "GELU's erf form": (dict(GPT2, activation="gelu"), "model.activation='gelu'"),
    "ALiBi": (dict(positional="alibi"), "model.positional='alibi'"),
    "relative": (dict(positional="relative"), "model.positional='relative'"),
    "sliding window": (dict(sliding_window=8), "model.sliding_window=8"),
    "plain feed-forward in llama": (dict(gated=False), "model.gated=False"),
    "no final norm": (dict(final_norm=False), "model.final_norm=False"),
    "embedding norm": (dict(embedding_norm=True), "model.embedding_norm=True"),
    "encoder": (dict(arch="encoder"), "model.arch='encoder'"),
    "latent attention": (LATENT, "model.attention='latent'"),
}


@pytest.mark.parametrize(("fields", "named"), list(REFUSED.values()), ids=list(REFUSED))
def test_what_llama_cpp_cannot_compute_is_refused(fields, named, tokenizer, tmp_path) -> None:
    config = ModelConfig(**{**LLAMA, **fields, "vocab_size": tokenizer.vocab_size})
    with pytest.raises(ValueError, match=r"llama\.cpp cannot run it as ours") as refusal:
        save_gguf(build_model(config), tokenizer, tmp_path / "model.gguf", "f16", "x")
    assert named in str(refusal.value) and "\n" not in str(refusal.value)
    assert not list(tmp_path.iterdir())


def test_tokenizers_llama_cpp_cannot_reproduce_are_refused(tmp_path: Path) -> None:
    model = build_model(ModelConfig(**{**LLAMA, "vocab_size": 400}))
    kinds = {
        "char": Tokenizer.train("char", [TEXT], 100, ("unk", "eos")),
        "wordpiece": Tokenizer.train("wordpiece", [TEXT], 100, ("unk", "eos")),
        "lowercase": Tokenizer.train("bpe", [TEXT], 300, ("unk", "eos"), lowercase=True),
        "eos": Tokenizer.train("bpe", [TEXT], 300, ("unk",)),
    }
    wanted = {
        "char": "data.tokenizer='char'",
        "wordpiece": "data.tokenizer='wordpiece'",
        "lowercase": "data.lowercase=true",
        "eos": "no eos token",
    }
    for kind, tokenizer in kinds.items():
        with pytest.raises(ValueError, match=r"llama\.cpp cannot run it as ours") as refusal:
            save_gguf(model, tokenizer, tmp_path / "model.gguf", "f16", "x")
        assert wanted[kind] in str(refusal.value), kind
        if kind in ("char", "wordpiece"):
            assert "train with data.tokenizer=bpe" in str(refusal.value)
    assert not list(tmp_path.iterdir())


def cli(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["--quiet", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_writes_the_file_and_says_what(trained, capsys) -> None:
    style, directory, _, _ = trained
    out = directory / "cli.gguf"
    status, printed, _ = cli(capsys, "export-gguf", str(directory / "run"), "--out", str(out))
    assert status == 0 and out.is_file()
    assert printed == (
        f"{out}: {out.stat().st_size / 2**20:.2f} MiB ({out.stat().st_size:,} bytes), f16, "
        f"llama.cpp {style}\n"
    )


def refused(capsys, run: Path, out: Path, *fragments: str) -> None:
    status, _, err = cli(capsys, "export-gguf", str(run), "--out", str(out))
    assert status == 2 and err.count("\n") == 1 and err.startswith("scratchformer: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err
    assert not out.exists()


def test_cli_refuses_a_char_run_in_one_line(text_file: Path, tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "char"
    data = [f"data.train='{text_file}'", f"data.val='{text_file}'", "data.dataset=none"]
    train(run_dir, "shakespeare-char.toml", *data, "data.lm.block_size=16", "model.max_len=64")
    refused(capsys, run_dir, tmp_path / "m.gguf", str(run_dir), "train with data.tokenizer=bpe")


def test_cli_refuses_an_encoder_run_in_one_line(classification_run, tmp_path, capsys) -> None:
    refused(capsys, classification_run, tmp_path / "m.gguf", "model.arch='encoder'", "export-hf")


def test_cli_refuses_an_int8_run_and_a_directory(trained, capsys, tmp_path: Path) -> None:
    _, directory, _, _ = trained
    quantized = tmp_path / "int8"
    assert main(["--quiet", "quantize", str(directory / "run"), "--out", str(quantized)]) == 0
    refused(capsys, quantized, tmp_path / "m.gguf", "int8 weights", "export the run")
    status, _, err = cli(capsys, "export-gguf", str(directory / "run"), "--out", str(tmp_path))
    assert status == 2 and "is a directory" in err and err.count("\n") == 1
    status, _, err = cli(capsys, "export-gguf", "run", "--out", "m.gguf", "--type", "q4_0")
    assert status == 2 and "invalid choice: 'q4_0'" in err


def test_a_recipe_path_of_the_docs(text_file: Path, tmp_path: Path, capsys) -> None:
    """docs/export.md's steps, with the recipe's sizes cut down: train the Llama recipe with
    a byte-level BPE, export, generate in llama.cpp."""
    run_dir, out = tmp_path / "run", tmp_path / "model.gguf"
    data = [f"data.train='{text_file}'", f"data.val='{text_file}'", *TRAINING[:4]]
    args = ["--quiet", "train", str(RECIPES / "shakespeare-llama.toml"), "--out", str(run_dir)]
    assert main([*args, *set_options([*data, "train.max_steps=2", "model.n_layers=1"])]) == 0
    assert main(["--quiet", "export-gguf", str(run_dir), "--out", str(out), "--type", "q8_0"]) == 0
    model = llama_cpp.Llama(model_path=str(out), n_ctx=0, n_threads=2, verbose=False)
    try:
        completion = model("ROMEO:", max_tokens=8, temperature=0.0)
        assert model.n_ctx() == ModelConfig.max_len  # n_ctx=0: the model's context
    finally:
        model.close()
    assert completion["choices"][0]["text"]


def test_without_gguf_the_extra_is_named(trained, monkeypatch, tmp_path: Path) -> None:
    _, directory, _, _ = trained
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else find_spec(name)
    )
    with pytest.raises(ValueError, match=r"pip install 'scratchformer\[export\]'"):
        export_gguf(directory / "run", tmp_path / "m.gguf")
    assert not list(tmp_path.iterdir())
