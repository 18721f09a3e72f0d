import ast
import hashlib
import io
import os
from pathlib import Path
from urllib.error import URLError

import pytest

from scratchformer.data import (
    DATASETS,
    DataError,
    DatasetNotFoundError,
    TextDataset,
    dataset_file,
    registry,
)


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path) -> list[str]:
    """No test touches the network or the real cache: downloads fail, the cache is empty.
    Returns the URLs that were asked for."""
    asked: list[str] = []

    def urlopen(url: str, timeout: float) -> io.BytesIO:
        asked.append(url)
        raise URLError("network is unreachable")

    monkeypatch.setattr(registry, "urlopen", urlopen)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SCRATCHFORMER_DATA", raising=False)
    return asked


def make_sst2(root: Path, files: tuple[str, ...] = ("train.tsv", "dev.tsv")) -> Path:
    """A stand-in sst2 directory under ``root`` (resolution looks at names, not contents)."""
    directory = root / "sst2"
    directory.mkdir(parents=True)
    for file in files:
        (directory / file).write_text("label\tsentence\n1\tgood\n")
    return directory


@pytest.fixture
def toy() -> TextDataset:
    """A downloadable one-file dataset whose content is ``b"hello\\n"``."""
    return TextDataset(
        name="toy",
        description="test data",
        splits=("train",),
        pattern="{split}.txt",
        sha256={"train.txt": hashlib.sha256(b"hello\n").hexdigest()},
        url="https://example.invalid/{file}",
        train_fraction=1.0,
    )


def serve(monkeypatch, content: bytes) -> list[tuple[str, float]]:
    """Make downloads answer ``content``; returns the (url, timeout) of each request."""
    requests: list[tuple[str, float]] = []

    def urlopen(url: str, timeout: float) -> io.BytesIO:
        requests.append((url, timeout))
        return io.BytesIO(content)

    monkeypatch.setattr(registry, "urlopen", urlopen)
    return requests


# --- the spec table --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_checksums_are_those_of_the_shared_files(name: str, data_dir: Path) -> None:
    for file, expected in DATASETS[name].sha256.items():
        assert hashlib.sha256((data_dir / name / file).read_bytes()).hexdigest() == expected, file


def test_download_urls() -> None:
    assert DATASETS["tinyshakespeare"].file_url("input.txt") == (
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
    )
    assert DATASETS["multi30k"].file_url("val.fr.gz") == (
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/val.fr.gz"
    )
    for name in ("sst2", "conll2003", "stsb"):
        assert DATASETS[name].url is None
        assert "not downloaded" in DATASETS[name].description
    assert len(DATASETS["multi30k"].sha256) == 9


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: dataset_file("imdb", "train"), "dataset 'imdb'; expected one of tinyshakespeare"),
        (lambda: dataset_file("sst2", "test"), "sst2 split 'test'; expected one of train, dev"),
        (lambda: dataset_file("multi30k", "val"), "language None; expected one of de, en, fr"),
        (lambda: dataset_file("multi30k", "val", lang="es"), "'es'; expected one of de, en, fr"),
        (lambda: dataset_file("sst2", "dev", lang="en"), "sst2 has one language"),
        (
            lambda: DATASETS["multi30k"].examples("de-de", "val"),
            "'de-de'; expected one of de-en, de-fr, en-",
        ),
        (
            lambda: DATASETS["tinyshakespeare"].text("test"),
            "split 'test'; expected one of train, val",
        ),
    ],
)
def test_unknown_names_list_the_valid_ones(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


# --- resolution ------------------------------------------------------------------------------


def test_explicit_path_beats_env_var_beats_cache(tmp_path, monkeypatch) -> None:
    explicit, env = make_sst2(tmp_path / "explicit"), make_sst2(tmp_path / "env")
    cache = make_sst2(tmp_path / "cache" / "scratchformer")
    monkeypatch.setenv("SCRATCHFORMER_DATA", str(tmp_path / "env"))
    assert dataset_file("sst2", "dev", root=explicit) == explicit / "dev.tsv"
    assert dataset_file("sst2", "dev", root=tmp_path / "explicit") == explicit / "dev.tsv"
    assert dataset_file("sst2", "dev") == env / "dev.tsv"
    monkeypatch.delenv("SCRATCHFORMER_DATA")
    assert dataset_file("sst2", "dev") == cache / "dev.tsv"


def test_a_directory_counts_only_with_the_file_asked_for(tmp_path, monkeypatch) -> None:
    env = make_sst2(tmp_path / "env", files=("train.tsv",))
    cache = make_sst2(tmp_path / "cache" / "scratchformer")
    monkeypatch.setenv("SCRATCHFORMER_DATA", str(tmp_path / "env"))
    assert dataset_file("sst2", "train") == env / "train.tsv"
    assert dataset_file("sst2", "dev") == cache / "dev.tsv"
    with pytest.raises(DatasetNotFoundError, match=r"missing dev\.tsv"):
        dataset_file("sst2", "dev", root=env)


def test_missing_everywhere_and_offline_is_one_clear_error(tmp_path, monkeypatch, offline):
    monkeypatch.setenv("SCRATCHFORMER_DATA", str(tmp_path / "env"))
    with pytest.raises(DatasetNotFoundError) as info:
        DATASETS["tinyshakespeare"].text("train")
    message = str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert message.startswith("dataset 'tinyshakespeare' not found: looked in ")
    assert str(tmp_path / "env" / "tinyshakespeare") in message
    assert str(tmp_path / "cache" / "scratchformer" / "tinyshakespeare") in message
    assert "network is unreachable" in message
    assert message.endswith("Set SCRATCHFORMER_DATA to the directory that holds tinyshakespeare/")
    assert offline == [DATASETS["tinyshakespeare"].file_url("input.txt")]


def test_without_a_url_nothing_is_downloaded(tmp_path, monkeypatch, offline) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(DatasetNotFoundError) as info:
        DATASETS["sst2"].examples("dev")
    message = str(info.value)
    assert "$SCRATCHFORMER_DATA (not set)" in message
    assert str(tmp_path / "home" / ".cache" / "scratchformer" / "sst2") in message
    assert "no single canonical URL" in message and "Set SCRATCHFORMER_DATA" in message
    assert offline == []


def test_download_into_the_cache_once(tmp_path, monkeypatch, toy) -> None:
    requests = serve(monkeypatch, b"hello\n")
    path = toy.file("train")
    assert path == tmp_path / "cache" / "scratchformer" / "toy" / "train.txt"
    assert path.read_bytes() == b"hello\n"
    assert requests == [("https://example.invalid/train.txt", registry.DOWNLOAD_TIMEOUT)]
    assert toy.file("train") == path
    assert len(requests) == 1
    assert os.listdir(path.parent) == ["train.txt"]  # no temporary file is left


def test_a_checksum_mismatch_deletes_the_download(tmp_path, monkeypatch, toy) -> None:
    serve(monkeypatch, b"tampered\n")
    destination = tmp_path / "cache" / "scratchformer" / "toy" / "train.txt"
    with pytest.raises(DataError) as info:
        toy.file("train")
    assert str(info.value).startswith(f"{destination}: the download from https://example")
    assert hashlib.sha256(b"tampered\n").hexdigest() in str(info.value)
    assert os.listdir(destination.parent) == []


# --- the loaders on the real files ---------------------------------------------------------


@pytest.fixture
def shared(monkeypatch, data_dir: Path) -> None:
    monkeypatch.setenv("SCRATCHFORMER_DATA", str(data_dir))


def test_shakespeare_is_split_90_10_by_characters(shared) -> None:
    shakespeare = DATASETS["tinyshakespeare"]
    train, val = shakespeare.text("train"), shakespeare.text("val")
    n = 1_115_394
    assert (len(train), len(val)) == (int(n * 0.9), n - int(n * 0.9))
    assert train.startswith("First Citizen:") and val.endswith("art waking.\n")


def test_language_pairs_pick_source_and_target(shared) -> None:
    multi30k = DATASETS["multi30k"]
    en_de, de_en = multi30k.examples("en-de", "val"), multi30k.examples("de-en", "val")
    assert len(en_de) == 1_014 and len(multi30k.examples("fr-en", "test_2016_flickr")) == 1_000
    assert multi30k.examples("fr-en", "test") == multi30k.examples("fr-en", "test_2016_flickr")
    english = "A group of men are loading cotton onto a truck"
    german = "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen"
    assert en_de[0] == (english, german) and de_en[0] == (german, english)


def test_task_examples(shared) -> None:
    dev = DATASETS["sst2"].examples("dev")
    assert len(dev) == 872 and {example.label for example in dev} == {"0", "1"}
    assert DATASETS["sst2"].examples("val") == dev  # the tasks' name of GLUE's dev split
    stsb = DATASETS["stsb"].examples("train")
    assert len(stsb) == 4_249 and stsb[0].label == 5.0 and len(stsb[0].texts) == 2
    assert len(DATASETS["conll2003"].examples("dev")) == 3_250


def test_data_knows_nothing_of_models() -> None:
    layers = tuple(f"scratchformer.{name}" for name in ("models", "nn", "training", "tasks"))
    for source in Path(registry.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                package = "scratchformer.data".rsplit(".", node.level - 1)[0] if node.level else ""
                base = ".".join(filter(None, [package, node.module]))
                modules = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for module in modules:
                assert not module.startswith(layers), f"{source.name} imports {module}"
