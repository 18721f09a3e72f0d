"""Shared test set-up.

Tests run tiny models, for which one thread is fastest: with two, OpenMP's hand-offs cost
more than the work and a busy machine makes them much slower still. ``make test`` runs
them in one process a core (pytest-xdist), so each process keeps to one thread.

Compiled models pick their products among ATen's GEMMs only: with Inductor's C++ GEMM
templates too, autotuning compiles and times a C++ kernel for every shape, tens of seconds
each on a fresh machine, which would make the compiled tests most of the suite's time. The
tests hold what the compiled paths compute (equal to eager, the graphs, the patterns
matched); the benchmarks run them fully autotuned and check their outputs too. Each
worker compiles in its own process (one compile thread): the workers already keep every
core busy, and a pool of compile processes a worker would only add their start-up. The
settings are in the environment, so that commands the tests start inherit them.
"""

import os
import random
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers import (
    CONLL,
    FAULTS_PROPERTY,
    FILLER,
    PREFERENCES,
    chat_file,
    dpo,
    fine_tune,
    pairs_file,
    pretrain_t5,
    squad_file,
    train,
    unavailable,
)
from scratchformer.inference import compile_choice, exported
from scratchformer.kernels import kernels_available, quantized

REPO = Path(__file__).resolve().parents[1]

torch.set_num_threads(1)
os.environ.setdefault("TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS", "ATEN")
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


@pytest.fixture
def written_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Int8 maps made hereafter multiply as on a CPU without the int8 kernel (an Arm CPU, a
    GPU): written out in float32, packed when compiled."""
    monkeypatch.setattr(quantized, "kernels_available", lambda: False)


REQUIRE_KERNELS = "SCRATCHFORMER_REQUIRE_KERNELS"
"""Set to 1 (as the CI does), a test of the C++ kernels cannot skip where they do not run."""


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``cpu_kernels`` (``helpers.with_cpu_kernels``) runs where the C++
    kernels do: elsewhere it is skipped, or failed with :data:`REQUIRE_KERNELS` set to 1.
    Asked here, not when the tests are collected, so that a run without such tests never
    builds the kernels."""
    if item.get_closest_marker("cpu_kernels") and not kernels_available():
        unavailable(
            "the CPU kernels run on x86 CPUs with AVX2 and a C++ compiler only", REQUIRE_KERNELS
        )


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same random state."""
    torch.manual_seed(0)


@pytest.fixture(scope="session", autouse=True)
def kept_steps(tmp_path_factory) -> Iterator[Path]:
    """Where decoding steps compiled ahead of time are kept (``exported.packages_dir``): a
    directory of the session's, not the user's cache; a step one test compiled, the next
    loads."""
    path = tmp_path_factory.mktemp("kept-steps")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(exported, "packages_dir", lambda: path)
        yield path


@pytest.fixture(autouse=True)
def _compile_ledger(monkeypatch: pytest.MonkeyPatch, tmp_path_factory) -> None:
    """Every test starts with no measurements of compiling (a ledger of its own), so that
    what one test measured never makes another compile."""
    ledger = tmp_path_factory.mktemp("ledger") / "costs.json"
    monkeypatch.setattr(compile_choice, "ledger_path", lambda: ledger)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared datasets (``$SCRATCHFORMER_DATA``, else ``../shared/data``)."""
    path = Path(os.environ.get("SCRATCHFORMER_DATA") or REPO.parent / "shared" / "data")
    if not path.is_dir():
        pytest.skip(f"datasets not found at {path}; set SCRATCHFORMER_DATA")
    os.environ["SCRATCHFORMER_DATA"] = str(path)
    return path


SMALL_COPY = ["data.synthetic.train_size=200", "data.synthetic.val_size=20"]
"""A small synthetic copy task: a run's evaluations and translations of it take moments."""


@pytest.fixture(scope="session")
def copy_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny translation run (the synthetic copy task, two heads) for the commands that
    read, draw or quantize a run."""
    run_dir = tmp_path_factory.mktemp("runs") / "copy"
    train(run_dir, "copy.toml", *SMALL_COPY, "model.n_heads=2")
    return run_dir


@pytest.fixture(scope="session")
def lora_copy_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny LoRA run of the synthetic copy task (from its seed's weights), for the tests
    that merge or quantize one."""
    run_dir = tmp_path_factory.mktemp("runs") / "lora"
    train(run_dir, "copy.toml", *SMALL_COPY, "train.lora_rank=2", "train.eval_batches=1")
    return run_dir


@pytest.fixture(scope="session")
def classification_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny sentiment classifier (``recipes/sst2.toml``) trained on a TSV file written
    here, for the commands and endpoints that classify."""
    directory = tmp_path_factory.mktemp("cls")
    data = directory / "train.tsv"
    data.write_text("text\tlabel\n" + "good fun\tpos\nbad dull\tneg\n" * 10)
    train(
        directory / "run",
        "sst2.toml",
        f"data.train='{data}'",
        f"data.val='{data}'",
        "data.text_columns=['text']",
        "data.label_column='label'",
        "data.dataset=none",
        "data.vocab_size=50",
    )
    return directory / "run"


NAMES = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Niklaus", "Tony"]


@pytest.fixture(scope="session")
def qa_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny extractive QA run (``recipes/squad.toml``, 32-token windows) on contexts that
    name a winner, written here."""
    directory = tmp_path_factory.mktemp("qa")
    triples = [
        (f"{FILLER[: 7 * i]} The winner is {name}. Then {FILLER[: 5 * i]}", "Who won?", name)
        for i, name in enumerate(NAMES * 3)
    ]
    data = squad_file(directory / "train.json", triples)
    run_dir = directory / "run"
    train(
        run_dir,
        "squad.toml",
        f"data.train='{data}'",
        f"data.val='{data}'",
        "data.dataset=none",
        "data.vocab_size=200",
        "data.max_len=32",
        "data.qa.doc_stride=8",
        "model.max_len=32",
    )
    return run_dir


@pytest.fixture(scope="session")
def tagging_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny tagger (``recipes/conll2003.toml``) trained on :data:`helpers.CONLL`."""
    directory = tmp_path_factory.mktemp("tagging")
    data = directory / "train.txt"
    data.write_text(CONLL * 5, encoding="utf-8")
    settings = [f"data.train='{data}'", f"data.val='{data}'", "data.dataset=none"]
    train(directory / "run", "conll2003.toml", *settings, "data.vocab_size=60")
    return directory / "run"


MLM_SENTENCES = [
    "the cat sat on the mat .",
    "a dog ran under the old tree .",
    "the red bird sang in the garden .",
    "my friend read a long book by the fire .",
    "a small boat crossed the cold river .",
]


@pytest.fixture(scope="session")
def pretraining_text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A text file of :data:`MLM_SENTENCES` in forty orders, a line each."""
    text = tmp_path_factory.mktemp("mlm-text") / "text.txt"
    lines = [" ".join(MLM_SENTENCES[i % 5 :] + MLM_SENTENCES[: i % 5]) for i in range(40)]
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return text


@pytest.fixture(scope="session")
def mlm_run(tmp_path_factory: pytest.TempPathFactory, pretraining_text: Path) -> Path:
    """A tiny masked-LM run (``recipes/pretrain-encoder.toml`` in BERT's layout, whole words
    masked, 64 positions, a cased vocabulary) trained for a few steps on
    :func:`pretraining_text`, so that no dataset is needed: the pretraining run that the
    tests read, export, fine-tune from and train again to resume."""
    run_dir = tmp_path_factory.mktemp("runs") / "mlm"
    train(
        run_dir,
        "pretrain-encoder.toml",
        "data.pretraining.corpus=[]",
        f"data.train='{pretraining_text}'",
        f"data.val='{pretraining_text}'",
        "data.vocab_size=120",
        "data.max_len=32",
        "data.mlm.whole_word_mask=true",
        "model.max_len=64",
        "model.norm_first=false",  # BERT's post-LN and positions, to export as a BertForMaskedLM
        "model.positional='learned'",
    )
    return run_dir


@pytest.fixture(scope="session")
def rtd_run(tmp_path_factory: pytest.TempPathFactory, pretraining_text: Path) -> Path:
    """A tiny run of ``recipes/pretrain-electra.toml`` (replaced-token detection) on
    :func:`pretraining_text`."""
    run_dir = tmp_path_factory.mktemp("runs") / "rtd"
    train(
        run_dir,
        "pretrain-electra.toml",
        "data.pretraining.corpus=[]",
        f"data.train='{pretraining_text}'",
        f"data.val='{pretraining_text}'",
        "data.vocab_size=120",
        "data.max_len=32",
    )
    return run_dir


@pytest.fixture(scope="session")
def contrastive_run(tmp_path_factory: pytest.TempPathFactory, mlm_run: Path) -> Path:
    """A tiny run of ``recipes/pretrain-sentences.toml`` (contrastive sentence pretraining)
    from :func:`mlm_run`, on the sentences of :data:`PARAGRAPHS`, the case kept."""
    text = tmp_path_factory.mktemp("sentences") / "text.txt"
    text.write_text(PARAGRAPHS, encoding="utf-8")
    run_dir = tmp_path_factory.mktemp("runs") / "contrastive"
    train(
        run_dir,
        "pretrain-sentences.toml",
        f"train.init_from='{mlm_run}'",
        "data.pretraining.corpus=[]",
        f"data.train='{text}'",
        f"data.val='{text}'",
        "data.lowercase=false",
        "data.max_len=32",
    )
    return run_dir


PARAGRAPHS = (
    "The cat sat on the mat. A dog ran under the old tree. The red bird sang.\n\n"
    "My friend read a long book by the fire. A small boat crossed the cold river. The "
    "cat sat on the mat.\n"
)
"""Two paragraphs of six sentences, one repeated: five sentences once each."""


WORDS = ("a", "man", "dog", "woman", "runs", "sits", "on", "the", "in", "red", "park", "with")


@pytest.fixture(scope="session")
def t5_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """300 sentences of random words, one a line: a corpus to pretrain on."""
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    lines = (" ".join(rng.choices(WORDS, k=rng.randint(4, 12))) for _ in range(300))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def span_run(t5_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny span-corruption run of 2 steps, for the commands that fill sentinels."""
    run_dir = tmp_path_factory.mktemp("runs") / "span"
    assert pretrain_t5(run_dir, t5_corpus, "train.max_steps=2") == 0
    return run_dir


LM_TEXT = "to be or not to be, that is the question: whether 'tis nobler in the mind.\n" * 30


@pytest.fixture(scope="session")
def lm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama-style language model with a byte-level BPE tokenizer (it has an eos
    token), trained on a line of Hamlet until it writes text (not stray bytes)."""
    text = tmp_path_factory.mktemp("lm-text") / "text.txt"
    text.write_text(LM_TEXT, encoding="utf-8")
    run_dir = tmp_path_factory.mktemp("runs") / "lm"
    train(
        run_dir,
        "shakespeare-llama.toml",
        f"data.train='{text}'",
        f"data.val='{text}'",
        "data.dataset=none",
        "data.tokenizer=bpe",
        "data.vocab_size=300",
        "data.lm.block_size=16",
        "model.max_len=64",
        "model.n_kv_heads=2",
        "train.max_steps=60",
        "train.eval_every=60",
    )
    return run_dir


@pytest.fixture(scope="session")
def sft_run(lm_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A chat fine-tune of :func:`lm_run` (its default template) on :data:`helpers.CHAT`."""
    directory = tmp_path_factory.mktemp("sft")
    data = chat_file(directory / "chat.jsonl")
    assert fine_tune(directory / "run", data, f"train.init_from='{lm_run}'") == 0
    return directory / "run"


@pytest.fixture(scope="session")
def dpo_run(sft_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA preference tuning of :func:`sft_run` on the first three of
    :data:`helpers.PREFERENCES`, six steps, every one logged."""
    directory = tmp_path_factory.mktemp("dpo")
    data = pairs_file(directory / "pairs.jsonl", PREFERENCES[:3])
    settings = ["train.lora_rank=4", "train.lr=1e-2", "train.warmup_steps=0"]
    settings += ["train.max_steps=6", "train.eval_every=6", "train.log_every=1"]
    assert dpo(directory / "run", data, f"train.init_from='{sft_run}'", *settings) == 0
    return directory / "run"


INJECTED: Counter[str] = Counter()
SURVIVED: Counter[str] = Counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Tallies the faults that a fault-injection test reported (``tests/faults``), in this
    process or, with pytest-xdist, from a worker's report."""
    if report.when != "teardown":
        return
    for name, counts in report.user_properties:
        if name == FAULTS_PROPERTY:
            for kind, (injected, survived) in counts.items():
                INJECTED[kind] += injected
                SURVIVED[kind] += survived


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not INJECTED:
        return
    terminalreporter.section("faults injected / survived")
    for kind, count in sorted(INJECTED.items()):
        terminalreporter.write_line(f"{kind:<52} {count:>3} / {SURVIVED[kind]}")
    total = sum(INJECTED.values())
    terminalreporter.write_line(f"{'all':<52} {total:>3} / {sum(SURVIVED.values())}")


CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""Chromium offline: nothing it starts reaches out to the network."""
REQUIRE_BROWSER = "SCRATCHFORMER_REQUIRE_BROWSER"
"""Set to 1 (as the CI does), a browser test cannot skip for want of a browser."""


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium, headless, with nothing that reaches out to the network."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed (pip install playwright)", REQUIRE_BROWSER)
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).is_file():
        unavailable("Chromium is not installed (apt-get install chromium)", REQUIRE_BROWSER)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
