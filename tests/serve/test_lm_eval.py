"""lm-evaluation-harness (``lm_eval``) scores our models as it scores anyone's: by its
``hf`` backend on an ``export-hf`` checkpoint, and by its ``local-completions`` backend
against ``scratchformer serve`` (prompt log-probabilities of ``/v1/completions``). Its
tasks are written here over local files; nothing comes from the Hugging Face hub."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import live, train
from scratchformer.cli import main
from scratchformer.data.registry import TextDataset, named_dataset
from scratchformer.run import load_run

BLOCK = 32
"""The runs' training and evaluation block (``data.lm.block_size``)."""
CONTEXT = 128
"""The runs' context (``model.max_len``): a question and its longest choice fit in it."""
WINDOWS = 128
"""Blocks of the scored text: ``WINDOWS * BLOCK + 1`` characters of the validation split."""
QUESTIONS = 60
CHOICES = 4
LONGEST_LINE = 60
"""Characters of a question's line and of each choice at most (both fit :data:`CONTEXT`)."""


@pytest.fixture(scope="module", autouse=True)
def offline() -> Iterator[None]:
    """Hugging Face's libraries stay off the network: every file is local."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_DATASETS_OFFLINE", "1")
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture(scope="module")
def shakespeare(data_dir: Path) -> TextDataset:
    """The tiny shakespeare corpus (its 90/10 train/val split by characters)."""
    dataset = named_dataset("tinyshakespeare", TextDataset)
    assert dataset is not None
    return dataset


@pytest.fixture(scope="module")
def training_text(tmp_path_factory: pytest.TempPathFactory, shakespeare: TextDataset) -> Path:
    """The first 200,000 characters of the training split: every character of the
    validation split occurs in them, so a character vocabulary learnt from them has no
    unknown token on the texts scored here."""
    path = tmp_path_factory.mktemp("shakespeare") / "train.txt"
    path.write_text(shakespeare.text("train")[:200_000], encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, training_text: Path) -> dict[str, Path]:
    """A run of each style, trained for seconds on :func:`training_text`: Llama's
    (``shakespeare-llama.toml``, characters) and GPT-2's (``shakespeare-char.toml`` with
    learned positions, byte-level BPE)."""
    directory = tmp_path_factory.mktemp("lm-eval-runs")
    common = [
        f"data.train='{training_text}'",
        f"data.val='{training_text}'",
        "data.dataset=none",
        f"data.lm.block_size={BLOCK}",
        f"model.max_len={CONTEXT}",
        "train.max_steps=100",
        "train.eval_every=100",
        "train.eval_batches=1",
        "train.batch_size=16",
        "train.warmup_steps=10",
        "train.max_minutes=none",
    ]
    styles = {
        "llama": ("shakespeare-llama.toml", "model.n_kv_heads=2"),
        "gpt2": (
            "shakespeare-char.toml",
            "model.positional='learned'",
            "data.tokenizer='bpe'",
            "data.vocab_size=300",
        ),
    }
    for style, (recipe, *settings) in styles.items():
        train(directory / style, recipe, *common, *settings)
    return {style: directory / style for style in styles}


@pytest.fixture(scope="module")
def exports(runs: dict[str, Path]) -> dict[str, Path]:
    """Each run as a Hugging Face checkpoint (``export-hf``): GPT-2's or Llama's."""
    out = {style: run.parent / f"{style}-hf" for style, run in runs.items()}
    for style, run in runs.items():
        assert main(["--quiet", "export-hf", str(run), "--out", str(out[style])]) == 0
    return out


def scored_text(shakespeare: TextDataset) -> str:
    """The start of the validation split, ``WINDOWS`` blocks of targets after its first
    character."""
    return shakespeare.text("val")[: WINDOWS * BLOCK + 1]


def continuation_questions(path: Path, text: str) -> Path:
    """:data:`QUESTIONS` questions as JSON lines ``{"context", "choices", "gold"}``: a
    short line of ``text`` and which of :data:`CHOICES` short lines follows it (the true
    next line among lines that follow others, its place turning with the question)."""
    lines = text.splitlines()
    pairs = [
        (line, after)
        for line, after in itertools.pairwise(lines)
        if all(0 < len(part) <= LONGEST_LINE and not part.endswith(":") for part in (line, after))
    ]
    assert len(pairs) >= QUESTIONS
    pairs = pairs[:QUESTIONS]
    rows = []
    for index, (line, after) in enumerate(pairs):
        others = [pairs[(index + step) % QUESTIONS][1] for step in (7, 19, 31)]
        gold = index % CHOICES
        rows.append(
            {"context": line, "choices": [*others[:gold], after, *others[gold:]], "gold": gold}
        )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def task_file(directory: Path, name: str, data: Path, fields: str) -> Path:
    """A task ``name`` in ``directory`` (an ``include_path`` of lm-eval's TaskManager) over
    the JSON lines ``data``; ``fields``: the YAML of its type and documents' fields."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.yaml").write_text(
        f"task: {name}\n"
        "dataset_path: json\n"
        "dataset_kwargs:\n"
        f"  data_files: {{test: '{data}'}}\n"
        f"  cache_dir: '{directory / 'datasets-cache'}'\n"
        "test_split: test\n" + fields,
        encoding="utf-8",
    )
    return directory


ROLLING = """output_type: loglikelihood_rolling
doc_to_text: ''
doc_to_target: text
metric_list:
  - metric: bits_per_byte
"""
MULTIPLE_CHOICE = """output_type: multiple_choice
doc_to_text: context
doc_to_choice: choices
doc_to_target: gold
target_delimiter: "\\n"
metric_list:
  - metric: acc
"""


def lm_eval(tasks: Path, task: str, backend: str, model_args: dict[str, Any]) -> dict[str, Any]:
    """lm-eval's Python API: ``backend`` with ``model_args`` on ``task`` (from ``tasks``
    only); its result metrics and its per-document samples."""
    import lm_eval as harness
    from lm_eval.tasks import TaskManager

    out = harness.simple_evaluate(
        model=backend,
        model_args=model_args,
        tasks=[task],
        task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
        batch_size=8,
        device="cpu",
        log_samples=True,
    )
    return {"results": out["results"][task], "samples": out["samples"][task]}


def exported(export: Path, context: int, prefix: int) -> dict[str, Any]:
    """``hf`` model arguments for the checkpoint ``export``: float32 on the CPU, windows of
    ``context`` tokens, ``prefix`` the token before a document (lm-eval needs one; a
    character vocabulary has neither BOS nor EOS)."""
    return {
        "pretrained": str(export),
        "dtype": "float32",
        "max_length": context,
        "prefix_token_id": prefix,
    }


def served(run: Path, export: Path, url: str, context: int) -> dict[str, Any]:
    """``local-completions`` model arguments for ``run`` served at ``url``: token-id
    prompts made by the export's tokenizer, eight to a request, one attempt."""
    return {
        "model": run.name,
        "base_url": f"{url}/v1/completions",
        "tokenizer_backend": "huggingface",
        "tokenizer": str(export),
        "tokenized_requests": True,
        "max_length": context,
        "max_retries": 1,
    }


@pytest.mark.parametrize("backend", ["hf", "local-completions"])
def test_bits_per_byte_agrees_with_eval(
    backend: str,
    runs: dict[str, Path],
    exports: dict[str, Path],
    shakespeare: TextDataset,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """lm-eval's ``bits_per_byte`` of a text is ``scratchformer eval --data`` of it, in
    bits per byte.

    ``scratchformer eval`` cuts the text's tokens into blocks of ``block_size`` targets, a
    block's inputs the token before its first target and the targets but its last; the
    text's first token is never a target. Its ``bits_per_byte`` is the summed loss in bits
    over the UTF-8 bytes of the targets' text; its mean loss in nats per target converts
    to the same.

    lm-eval scores every token of a document, the first after a prefix token (by default
    the tokenizer's BOS or EOS), in windows of ``max_length`` targets for ``hf`` and of
    ``max_length - 2`` for ``local-completions`` (which keeps one place for a generated
    token and one for the prefix), each window starting one token earlier than ours; a
    last, shorter window has its earlier tokens as context. It sums the log-likelihoods
    and divides by the UTF-8 bytes of the document.

    The two are one computation when the document is the text without its first token,
    that token is the prefix (``prefix_token_id``, ``custom_prefix_token_id`` for the API
    models), the windows are ``block_size`` targets, and the targets fill whole blocks
    (``WINDOWS * BLOCK + 1`` tokens): each window then has the same inputs as one of our
    blocks, and the two agree to float32's rounding (4e-8 measured, 1e-4 asserted: far
    inside 0.5%, and outside what a window one token off costs, 0.1% to 0.8%). The text is
    characters of the validation split, tokens of a character tokenizer."""
    run, export = runs["llama"], exports["llama"]
    text = scored_text(shakespeare)
    ids = load_run(run)[0].tokenizer().encode(text)
    assert len(ids) == len(text) == WINDOWS * BLOCK + 1
    scored = tmp_path / "val.txt"
    scored.write_text(text, encoding="utf-8")
    assert main(["--quiet", "eval", str(run), "--data", str(scored)]) == 0
    metrics = json.loads(capsys.readouterr().out)
    document = text[1:]
    ours = metrics["bits_per_byte"]
    loss_in_bits = metrics["loss"] * (len(ids) - 1) / math.log(2)
    assert ours == pytest.approx(loss_in_bits / len(document.encode("utf-8")), rel=1e-9)

    data = tmp_path / "document.jsonl"
    data.write_text(json.dumps({"text": document}) + "\n", encoding="utf-8")
    tasks = task_file(tmp_path / "tasks", "shakespeare_bpb", data, ROLLING)
    if backend == "hf":
        theirs = lm_eval(tasks, "shakespeare_bpb", backend, exported(export, BLOCK, ids[0]))
    else:
        with live(run) as url:
            args = {**served(run, export, url, BLOCK + 2), "custom_prefix_token_id": ids[0]}
            theirs = lm_eval(tasks, "shakespeare_bpb", backend, args)
    bits_per_byte = theirs["results"]["bits_per_byte,none"]
    assert bits_per_byte == pytest.approx(ours, rel=1e-4)


@pytest.mark.parametrize("style", ["gpt2", "llama"])
def test_server_scores_choices_as_transformers(
    style: str,
    runs: dict[str, Path],
    exports: dict[str, Path],
    shakespeare: TextDataset,
    tmp_path: Path,
) -> None:
    """A multiple-choice task (which line follows a line of the play) scored by lm-eval's
    ``hf`` backend on the export and by ``local-completions`` against the served run: the
    same accuracy, each choice's log-likelihood within 1e-3."""
    data = continuation_questions(tmp_path / "questions.jsonl", shakespeare.text("val"))
    tasks = task_file(tmp_path / "tasks", "next_line", data, MULTIPLE_CHOICE)
    line_break = load_run(runs[style])[0].tokenizer().encode("\n")
    assert len(line_break) == 1
    reference = lm_eval(tasks, "next_line", "hf", exported(exports[style], CONTEXT, *line_break))
    assert len(reference["samples"]) == QUESTIONS
    with live(runs[style]) as url:
        args = served(runs[style], exports[style], url, CONTEXT)
        theirs = lm_eval(tasks, "next_line", "local-completions", args)
    assert theirs["results"]["acc,none"] == reference["results"]["acc,none"]
    for ours, hf in zip(theirs["samples"], reference["samples"], strict=True):
        assert ours["doc_id"] == hf["doc_id"]
        assert [ll for ll, _ in ours["filtered_resps"]] == pytest.approx(
            [ll for ll, _ in hf["filtered_resps"]], abs=1e-3
        )
