"""Small helpers shared by tests."""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest
import torch

from scratchformer import ModelConfig, build_model
from scratchformer.cli import main
from scratchformer.training.trainer import Trainer

FAULTS_PROPERTY = "faults"
"""The user property in which a fault-injection test reports, by kind, the faults it
injected and survived (``{kind: [injected, survived]}``), tallied in ``conftest.py``."""


def set_options(settings: Iterable[str]) -> list[str]:
    """``["a.b=1", "c.d=2"]`` -> ``["--set", "a.b=1", "--set", "c.d=2"]``."""
    return [part for setting in settings for part in ("--set", setting)]


RECIPES = Path(__file__).resolve().parents[1] / "recipes"

TINY_SIZES = {"d_model": 32, "n_heads": 4, "n_layers": 2, "d_ff": 64}
"""The sizes of the tests' tiny models."""
TINY_VOCAB = 29
COMPILED = {"n_layers": 1}
"""The compiled tests' models have one layer a stack: compiling takes time in proportion to
the layers, and how layers stack is the same code that the eager tests check."""
with_cpu_kernels = pytest.mark.cpu_kernels
"""For tests of the project's C++ kernels, which the suite builds where they run: elsewhere
the tests skip (``conftest.py``), or fail with ``SCRATCHFORMER_REQUIRE_KERNELS=1``."""


def unavailable(reason: str, requirement: str) -> NoReturn:
    """Skip the test for ``reason`` (something it needs is missing); fail it instead where
    the environment variable ``requirement`` is 1 (the CI, whose machine has everything),
    since there a skip would pass a test that never ran."""
    if os.environ.get(requirement) == "1":
        pytest.fail(f"{reason}, and {requirement}=1 requires this test to run")
    pytest.skip(reason)


def compiled_graphs() -> int:
    """How many graphs Dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def compile_without_inductor(monkeypatch: pytest.MonkeyPatch) -> None:
    """``torch.compile`` through Dynamo and AOTAutograd with eager kernels (Inductor's
    options dropped) for the rest of the test: what a command does under ``--compile`` is
    then checked in seconds. What Inductor's kernels compute is checked in
    ``tests/inference``, at tens of seconds a graph."""
    compile_ = torch.compile

    def aot_eager(model: Any, *args: Any, options: Any = None, **kwargs: Any) -> Any:
        return compile_(model, *args, backend="aot_eager", **kwargs)

    monkeypatch.setattr(torch, "compile", aot_eager)


def tiny_config(**fields: Any) -> ModelConfig:
    """A :class:`ModelConfig` of the tiny sizes and vocabulary; ``fields`` set the other
    fields or override them."""
    return ModelConfig(**{"vocab_size": TINY_VOCAB, **TINY_SIZES, **fields})


LLAMA_STYLE = dict(
    arch="decoder",
    norm_first=True,
    norm="rms",
    gated=True,
    activation="silu",
    bias=False,
    positional="rotary",
    scale_embedding=False,
)
"""The ModelConfig fields of a Llama-family decoder (RMSNorm, SwiGLU, rotary, no biases)."""

LATENT = dict(
    attention="latent", kv_lora_rank=12, qk_rope_head_dim=4, qk_nope_head_dim=6, v_head_dim=8
)
"""The ModelConfig fields of multi-head latent attention at the tiny sizes, every width its
own (so that a part read in another's place cannot fit)."""

T5_STYLE = dict(
    arch="seq2seq",
    norm_first=True,
    norm="rms",
    bias=False,
    positional="relative",
    scale_attention=False,
    scale_embedding=False,
    share_embeddings=True,
    scale_output=True,
    final_dropout=True,
    attention_dropout=0.1,
)
"""The ModelConfig fields of a T5 v1.0 (RMS norms, relative bias, unscaled attention, one
embedding table, the tied head's input scaled, no biases, dropout everywhere at one rate)."""

TINY_MODEL = [f"model.{name}={size}" for name, size in {**TINY_SIZES, "n_layers": 1}.items()]
"""Settings that make a recipe's model tiny (one layer: a run's tests need no depth)."""
TINY_RUN = [*TINY_MODEL, "train.max_steps=6", "train.eval_every=3", "train.batch_size=4"]
"""Settings for a tiny model's short training run."""


def train(run_dir: Path, recipe: str, *settings: str) -> None:
    args = ["--quiet", "train", str(RECIPES / recipe), "--out", str(run_dir)]
    assert main([*args, *set_options([*TINY_RUN, *settings])]) == 0


def tiny_pretraining(corpus: Path) -> list[str]:
    """Settings that make an encoder-decoder's pretraining recipe a tiny run on ``corpus``,
    a sentence a line."""
    return [
        *TINY_MODEL,
        "data.pretraining.corpus=none",
        f"data.train='{corpus}'",
        "data.pretraining.document_per_line=true",
        "data.tokenizer='char'",
        "data.vocab_size=60",
        "data.max_len=40",
        "model.dropout=0.1",  # so that resume must restore the random state exactly
        "train.batch_size=4",
        "train.eval_every=4",
        "train.warmup_steps=2",
        "train.max_minutes=none",
    ]


def tiny_t5(corpus: Path) -> list[str]:
    """Settings that make pretrain-t5.toml a tiny run on ``corpus``."""
    return [*tiny_pretraining(corpus), "data.span_corruption.sentinels=8"]


def pretrain_t5(out: Path, corpus: Path, *extra: str) -> int:
    """Span-corruption pretraining (``recipes/pretrain-t5.toml``, tiny) on ``corpus``."""
    recipe = str(RECIPES / "pretrain-t5.toml")
    return main(
        ["--quiet", "train", recipe, "--out", str(out), *set_options([*tiny_t5(corpus), *extra])]
    )


def translation_fine_tune(pretrained: Path, out: Path, *extra: str) -> int:
    """``multi30k-de-en-pretrained.toml`` from the run ``pretrained``, two steps on two
    sentence pairs written beside ``out``."""
    source, target = out.parent / "source.txt", out.parent / "target.txt"
    source.write_text("a man runs\nthe dog sits\n" * 4)
    target.write_text("the man runs\na dog sits\n" * 4)
    files = f"['{source}', '{target}']"
    options = [
        f"train.init_from='{pretrained}'",
        "data.dataset=none",
        f"data.train={files}",
        f"data.val={files}",
        "train.max_steps=2",
        "train.eval_every=2",
        "train.max_tokens=none",
        "train.batch_size=4",
        *extra,
    ]
    recipe = str(RECIPES / "multi30k-de-en-pretrained.toml")
    return main(["--quiet", "train", recipe, "--out", str(out), *set_options(options)])


def run(capsys, monkeypatch, stdin: str, *args: str) -> tuple[int, list[str], str]:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8"))))
    capsys.readouterr()
    status = main(["--quiet", *args])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err


def decoder(**overrides) -> torch.nn.Module:
    """A small random decoder-only LM (tied output), ``overrides`` of its config applied."""
    values = dict(arch="decoder", vocab_size=30, d_model=16, n_heads=2, n_layers=2, d_ff=32)
    return build_model(ModelConfig(**{**values, **overrides}))


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


PROMPTS = [[5, 9, 2], [7], [3, 1, 4, 1, 5, 9], [8, 8]]
"""Prompts of different lengths, for generation from :func:`tiny_lm`."""


def peaked(scale: float, **fields: Any) -> torch.nn.Module:
    """A random model of ``tiny_config(**fields)`` in eval mode whose (untied) output
    weights are scaled by ``scale``, so that its next-token distributions are peaked and
    greedy decisions are not near-ties."""
    model = build_model(tiny_config(tie_output=False, **fields)).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


def tiny_lm(positional: str = "learned", peaked_by: float = 4.0, **fields: Any) -> torch.nn.Module:
    """A tiny random decoder-only LM with peaked output distributions (:func:`peaked`)."""
    return peaked(peaked_by, arch="decoder", positional=positional, max_len=32, **fields)


def snapshot(directory: Path) -> dict[str, bytes | None]:
    """Every file under ``directory`` by relative path, with its bytes (``None`` for a
    directory): equal snapshots mean nothing was added, removed or changed."""
    return {
        str(path.relative_to(directory)): None if path.is_dir() else path.read_bytes()
        for path in sorted(directory.rglob("*"))
    }


@contextmanager
def interrupted_after(step: int) -> Iterator[None]:
    """Training inside the block stops as on Ctrl-C right after the checkpoint of ``step``
    (the command then exits 130)."""
    evaluate_and_checkpoint = Trainer._evaluate_and_checkpoint

    def interrupted(self: Trainer, *args: Any) -> Any:
        result = evaluate_and_checkpoint(self, *args)
        if self.state["step"] == step:
            raise KeyboardInterrupt
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Trainer, "_evaluate_and_checkpoint", interrupted)
        yield


@contextmanager
def live(run_dir: Path, **options) -> Iterator[str]:
    """The base URL of ``run_dir`` served with ``options`` until the block ends: uvicorn
    on 127.0.0.1 (a free port), in a thread of the test process."""
    import uvicorn

    from scratchformer.serve import ServeOptions, create_app

    config = uvicorn.Config(
        create_app(run_dir, ServeOptions(**options)),
        host="127.0.0.1",
        port=0,
        log_level="warning",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server did not start")
        threading.Event().wait(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def http(url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """The status and JSON answer of a request to ``url``: a POST of ``body`` as JSON (or
    of ``body`` itself if it is bytes), a GET without one."""
    import json
    import urllib.error
    import urllib.request

    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data, {"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


FILLER = " ".join(f"w{i}" for i in range(60))
"""Sixty distinct words, to pad contexts and stretch them past a window."""


CHAT = [
    [
        {"role": "system", "content": "Speak as Hamlet."},
        {"role": "user", "content": "What is the question?"},
        {"role": "assistant", "content": "To be, or not to be."},
    ],
    [
        {"role": "user", "content": "Whether 'tis nobler?"},
        {"role": "assistant", "content": "In the mind to suffer."},
        {"role": "user", "content": "And then?"},
        {"role": "assistant", "content": "The slings and arrows."},
    ],
]
"""Two conversations for chat fine-tuning, in the words of ``lm_run``'s text."""


def chat_file(path: Path, conversations: list[list[dict[str, str]]] = CHAT) -> Path:
    """A JSONL file of ``conversations``, one a line."""
    path.write_text("".join(json.dumps({"messages": c}) + "\n" for c in conversations))
    return path


def fine_tune(run_dir: Path, data: Path, *settings: str) -> int:
    """``scratchformer train`` of a chat fine-tune (``task = "sft"``) on ``data`` for two
    steps; the command's status."""
    recipe = run_dir.parent / "sft.toml"
    recipe.write_text('task = "sft"\n')
    options = [f"data.train='{data}'", f"data.val='{data}'", "train.max_steps=2", *settings]
    options += ["train.eval_every=2", "train.batch_size=2"]
    return main(["--quiet", "train", str(recipe), "--out", str(run_dir), *set_options(options)])


QUESTIONS = ["What is the question?", "Whether 'tis nobler?", "And then?", "To be?", "Or not?"]
RAMBLING = "whether whether whether the the the mind mind"
PREFERENCES = [
    {"prompt": prompt, "chosen": answer, "rejected": RAMBLING}
    for prompt, answer in zip(
        QUESTIONS, ["To be.", "Not to be.", "In the mind.", "The question.", "Nobler."], strict=True
    )
]
"""Preference pairs with a clear preference to learn: a short answer in ``lm_run``'s words
chosen, always the same ramble rejected. The first three train, the others are held back."""


def pairs_file(path: Path, pairs: list[dict[str, Any]]) -> Path:
    """A JSONL file of preference ``pairs``, one a line."""
    path.write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    return path


def dpo(run_dir: Path, data: Path, *settings: str) -> int:
    """``scratchformer train`` of a ``task = "dpo"`` run on ``data``; the command's status."""
    recipe = run_dir.parent / "dpo.toml"
    recipe.write_text('task = "dpo"\n')
    options = [f"data.train='{data}'", f"data.val='{data}'", "train.batch_size=2", *settings]
    return main(["--quiet", "train", str(recipe), "--out", str(run_dir), *set_options(options)])


CONLL = "Peter B-PER\nwent O\nto O\nParis B-LOC\n\nAnna B-PER\nsings O\n\n"
"""Two sentences of CoNLL-2003's layout (a word and its tag a line): a tiny tagger's data."""


def squad_file(path: Path, contexts: list[tuple[str, str, str]]) -> Path:
    """A SQuAD JSON file of ``(context, question, answer)`` triples."""
    qas = [
        {
            "context": context,
            "qas": [
                {
                    "id": str(i),
                    "question": question,
                    "answers": [{"text": answer, "answer_start": context.index(answer)}],
                }
            ],
        }
        for i, (context, question, answer) in enumerate(contexts)
    ]
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": qas}]}))
    return path


def earlier_layout(recipe: dict[str, Any]) -> dict[str, Any]:
    """A recipe's dict (``Recipe.to_dict()``) as earlier versions wrote it: every data key
    flat in ``data``, ``init_from`` and ELECTRA's fields flat in ``model``, no tables."""
    from scratchformer.config import MOVED_KEYS

    flat = json.loads(json.dumps(recipe))
    for old, new in MOVED_KEYS.items():
        *tables, key = new.split(".")
        body = flat
        for table in tables:
            body = body[table]
        section, name = old.split(".")
        flat[section][name] = body.pop(key)
    for section in ("data", "model"):
        flat[section] = {k: v for k, v in flat[section].items() if v != {}}
    return flat
