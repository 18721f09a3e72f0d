"""Named datasets: which files they have, where to find them, how to fetch them, and what
their splits hold; each declared once, as one entry of :data:`DATASETS`.

A dataset file's directory is, in order: the path the caller gives; ``$SCRATCHFORMER_DATA/<name>/``;
the user cache ``$XDG_CACHE_HOME/scratchformer/<name>/`` (default ``~/.cache``); else its
file is downloaded into the cache and its sha256 checked. A directory counts only if it
holds the file asked for. Offline with nothing found, one :class:`DatasetNotFoundError` says
where it looked and to set ``SCRATCHFORMER_DATA``.

An entry's class says what its splits hold, so which tasks can read it (a
:class:`TextDataset` for language modelling, a :class:`LabeledTextDataset` for sentence
classification, ...), and which of its training text joins a pretraining corpus
(:meth:`DatasetSpec.corpora`); a new dataset of a known kind is one entry.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar
from urllib.request import urlopen

from ..caches import cache_dir
from ..io import atomic_write_chunks
from ..registry import Registry
from .readers import (
    DataError,
    LabeledText,
    Question,
    TaggedSentence,
    read_conll,
    read_lines,
    read_parallel,
    read_squad,
    read_text,
    read_tsv,
)

ENV_VAR = "SCRATCHFORMER_DATA"
DOWNLOAD_TIMEOUT = 60.0
"""Seconds without an answer from the server before a download gives up."""
NO_URL = "no single canonical URL serves these exact files, so they are not downloaded"

Root = str | Path | None
"""A directory that holds a dataset's files (or its ``<name>/`` folder), else ``None``."""
Documents = Callable[[Root], Iterator[str]]
"""The documents of a training split, for a pretraining corpus."""


@dataclass(frozen=True)
class DatasetSpec(ABC):
    """A dataset: its splits, file names, download URLs and checksums.

    A split's file name is ``pattern`` formatted with ``split`` (and ``lang`` for a
    multilingual dataset); ``url`` is formatted with ``file``, or ``None`` when the files
    cannot be downloaded. ``sha256`` maps every file of the dataset to its checksum.
    ``split_names`` maps the splits that tasks ask for (``val``, ``test``) to the dataset's
    own names for them, where these differ (GLUE's ``dev``).
    """

    name: str
    description: str
    splits: tuple[str, ...]
    pattern: str
    sha256: dict[str, str]
    url: str | None = None
    languages: tuple[str, ...] = ()
    split_names: dict[str, str] = field(default_factory=dict)

    def file_name(self, split: str, lang: str | None = None) -> str:
        """The name of the file of ``split`` (in language ``lang``)."""
        split = self.split_names.get(split, split)
        _check(f"{self.name} split", split, self.splits)
        if self.languages:
            _check(f"{self.name} language", lang, self.languages)
        elif lang is not None:
            raise ValueError(f"{self.name} has one language; got lang={lang!r}")
        return self.pattern.format(split=split, lang=lang)

    def file_url(self, file: str) -> str | None:
        return None if self.url is None else self.url.format(file=file)

    def file(self, split: str, lang: str | None = None, root: Root = None) -> Path:
        """The file of ``split`` (in language ``lang``), found or downloaded."""
        return _resolve(self, self.file_name(split, lang), root)

    @abstractmethod
    def corpora(self) -> dict[str, Documents]:
        """``data.pretraining.corpus`` names -> the documents of the training split they
        stand for."""


@dataclass(frozen=True, kw_only=True)
class TextDataset(DatasetSpec):
    """One text file (language modelling), cut by characters: the first ``train_fraction``
    is the ``train`` split, the rest ``val``."""

    train_fraction: float

    def text(self, split: str, root: Root = None) -> str:
        """The text of ``split``."""
        text = read_text(self.file(split, root=root))
        cut = int(len(text) * self.train_fraction)
        return text[:cut] if split == "train" else text[cut:]

    def corpora(self) -> dict[str, Documents]:
        return {self.name: self.paragraphs}

    def paragraphs(self, root: Root) -> Iterator[str]:
        """The training text's paragraphs (separated by blank lines)."""
        text = self.text("train", root)
        return (part.strip() for part in text.split("\n\n") if part.strip())


@dataclass(frozen=True, kw_only=True)
class ParallelDataset(DatasetSpec):
    """A file per split and language (translation), line ``i`` of each a translation of
    line ``i`` of the others."""

    def examples(self, pair: str, split: str, root: Root = None) -> list[tuple[str, str]]:
        """``(source, target)`` sentences; ``pair`` is ``source-target``, e.g. ``de-en``."""
        pairs = tuple(f"{s}-{t}" for s in self.languages for t in self.languages if s != t)
        _check("language pair", pair, pairs)
        source, target = pair.split("-")
        return read_parallel(self.file(split, source, root), self.file(split, target, root))

    def corpora(self) -> dict[str, Documents]:
        """A corpus per language: ``<name>.<lang>``."""
        return {f"{self.name}.{lang}": partial(self.sentences, lang) for lang in self.languages}

    def sentences(self, lang: str, root: Root) -> Iterator[str]:
        """The training sentences in language ``lang``."""
        return iter(read_lines(self.file("train", lang, root)))


@dataclass(frozen=True, kw_only=True)
class LabeledTextDataset(DatasetSpec):
    """Tab-separated sentences or sentence pairs with a label or a value (sentence
    classification and regression), by column index."""

    text_columns: int | tuple[int, int]
    label_column: int
    header: bool
    labels: tuple[str, ...] | None = None
    """The classes (``None``: any label found)."""
    regression: bool = False
    """Whether the labels are values (numbers) rather than classes."""

    @property
    def pairs(self) -> bool:
        """Whether an example is a pair of sentences."""
        return not isinstance(self.text_columns, int)

    def examples(self, split: str, root: Root = None) -> list[LabeledText]:
        """The sentences (or pairs) of ``split`` with their labels (or values)."""
        return read_tsv(
            self.file(split, root=root),
            self.text_columns,
            self.label_column,
            header=self.header,
            labels=self.labels,
            regression=self.regression,
        )

    def corpora(self) -> dict[str, Documents]:
        return {self.name: self.sentences}

    def sentences(self, root: Root) -> Iterator[str]:
        """Every sentence of the training examples."""
        return (text for example in self.examples("train", root) for text in example.texts)


@dataclass(frozen=True, kw_only=True)
class TaggedSentenceDataset(DatasetSpec):
    """CoNLL files of words and their tags (tagging)."""

    def examples(self, split: str, root: Root = None) -> list[TaggedSentence]:
        """The sentences of ``split`` with their tags."""
        return read_conll(self.file(split, root=root))

    def corpora(self) -> dict[str, Documents]:
        return {self.name: self.sentences}

    def sentences(self, root: Root) -> Iterator[str]:
        """The training sentences, their words joined by spaces."""
        return (" ".join(sentence.tokens) for sentence in self.examples("train", root))


@dataclass(frozen=True, kw_only=True)
class QuestionDataset(DatasetSpec):
    """SQuAD JSON files of questions about contexts, with their answers (question
    answering)."""

    def examples(self, split: str, root: Root = None) -> list[Question]:
        """The questions of ``split`` with their contexts and reference answers."""
        return read_squad(self.file(split, root=root))

    def corpora(self) -> dict[str, Documents]:
        return {self.name: self.contexts}

    def contexts(self, root: Root) -> Iterator[str]:
        """Each training context once (a context has several questions)."""
        return iter(dict.fromkeys(question.context for question in self.examples("train", root)))


DATASETS: Registry[DatasetSpec] = Registry("dataset")
"""``data.dataset`` (and ``data.pretraining.corpus``) names -> their datasets."""


def _register(dataset: DatasetSpec) -> None:
    """Register ``dataset`` under its name."""
    DATASETS.add(dataset.name, dataset)


_register(
    TextDataset(
        name="tinyshakespeare",
        description="Tiny Shakespeare (karpathy/char-rnn), 1.1M characters for language "
        "modelling; split 90/10 train/val by characters as nanoGPT does.",
        splits=("train", "val"),
        pattern="input.txt",
        sha256={"input.txt": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"},
        url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        train_fraction=0.9,
    )
)
_register(
    ParallelDataset(
        name="multi30k",
        description="Multi30k task 1 (WMT16 multimodal): image captions in German, "
        "English and French, line i of each language a translation of the others; "
        "raw, gzip.",
        splits=("train", "val", "test_2016_flickr"),
        split_names={"test": "test_2016_flickr"},
        pattern="{split}.{lang}.gz",
        languages=("de", "en", "fr"),
        sha256={
            "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
            "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
            "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
            "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
            "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
            "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
            "test_2016_flickr.de.gz": (
                "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8"
            ),
            "test_2016_flickr.en.gz": (
                "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9"
            ),
            "test_2016_flickr.fr.gz": (
                "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90"
            ),
        },
        url="https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{file}",
    )
)
_register(
    LabeledTextDataset(
        name="sst2",
        description="GLUE SST-2 binary sentiment (label 0 negative, 1 positive), "
        f"tab-separated with a header; {NO_URL}.",
        splits=("train", "dev"),
        split_names={"val": "dev"},
        pattern="{split}.tsv",
        sha256={
            "train.tsv": "e981ceb4fe6c9acd1c79851d0d091b9e78103f1f2a399ca83dda27915d41c56c",
            "dev.tsv": "84207e6be5873fb18db798cc6faec86871f5a426554650ff64a1c34e87665f6f",
        },
        # by index: the sentence column is "sentence" in train.tsv but "content" in dev.tsv
        text_columns=1,
        label_column=0,
        header=True,
        labels=("0", "1"),
    )
)
_register(
    TaggedSentenceDataset(
        name="conll2003",
        description="CoNLL-2003 English named entities, BIO tags over PER, ORG, LOC, "
        f"MISC; {NO_URL}.",
        splits=("train", "dev"),
        split_names={"val": "dev"},
        pattern="{split}.txt",
        sha256={
            "train.txt": "ba02e7c06b2ce141883017efa0780612e0e9377f239321a1cbfd13d846a7c3e6",
            "dev.txt": "308f1f2e66df39b18f95870cef6d2b7cb16f8eb994f6b848d3172895b2af1def",
        },
    )
)
_register(
    LabeledTextDataset(
        name="stsb",
        description="STS benchmark (GLUE STS-B) sentence-pair similarity 0-5, both splits "
        f"from GLUE's training set, no header; {NO_URL}.",
        splits=("train", "dev"),
        split_names={"val": "dev"},
        pattern="{split}.tsv",
        sha256={
            "train.tsv": "e95ea1ca550f48383b106770c0dadc7dcb2c14a046f1ca0b6ba4d27d7e0fbb10",
            "dev.tsv": "5ff3d66a07bb2040c573b532f953dc514524e193a27b9be0a6f5622f7bec4eb5",
        },
        text_columns=(7, 8),
        label_column=9,
        header=False,
        regression=True,
    )
)
_register(
    QuestionDataset(
        name="squad",
        description="SQuAD v1.1 extractive question answering (JSON): the official dev "
        "set split by article, train 6,713 questions over 30 articles, val 1,168 over 6, "
        f"several reference answers each; {NO_URL}.",
        splits=("train", "val"),
        pattern="{split}.json",
        sha256={
            "train.json": "f1ebabd6e0be9a8ea8ab722960a09b4ff10f1920d237b9fac5db3cdd4765e44d",
            "val.json": "b71f9ae541a214f0df6c887f95ee8fe0c41e03693acdae0a8ee22271ed636518",
        },
    )
)


class DatasetNotFoundError(FileNotFoundError):
    """A dataset is in none of the places looked at, and could not be downloaded."""


def dataset_spec(name: str) -> DatasetSpec:
    """The dataset ``name``; an unknown name is a ``ValueError`` listing the known ones."""
    _check("dataset", name, tuple(DATASETS))
    return DATASETS[name]


def dataset_file(name: str, split: str, *, lang: str | None = None, root: Root = None) -> Path:
    """The file of ``split`` (in language ``lang``) of dataset ``name``."""
    return dataset_spec(name).file(split, lang, root)


Dataset = TypeVar("Dataset", bound=DatasetSpec)


def named_dataset(name: str | None, kind: type[Dataset]) -> Dataset | None:
    """The dataset ``name`` (``data.dataset``) if it is one of ``kind``, the kind a task
    reads; else ``None``."""
    if name not in DATASETS:
        return None
    dataset = DATASETS[name]
    return dataset if isinstance(dataset, kind) else None


def dataset_choice(
    kind: type[Dataset], suits: Callable[[Dataset], bool] = lambda dataset: True
) -> str:
    """How to name a dataset of ``kind`` (that ``suits`` a task), for the message of a task
    that has no data: ``data.dataset = 'squad'``, or ``data.dataset to one of sst2, stsb``."""
    names = [
        name for name, dataset in DATASETS.items() if isinstance(dataset, kind) and suits(dataset)
    ]
    if len(names) == 1:
        return f"data.dataset = {names[0]!r}"
    return f"data.dataset to one of {', '.join(names)}"


def _resolve(spec: DatasetSpec, file: str, root: Root) -> Path:
    """The first path of ``file`` that exists, downloading it into the cache if need be."""
    if root is not None:
        root = Path(root).expanduser()
        for directory in (root, root / spec.name):
            if (directory / file).is_file():
                return directory / file
        raise DatasetNotFoundError(
            f"dataset {spec.name!r} is not in {root} (nor {root / spec.name}): missing {file}"
        )
    looked = []
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env).expanduser() / spec.name / file
        if path.is_file():
            return path
        looked.append(f"{path.parent} (${ENV_VAR})")
    else:
        looked.append(f"${ENV_VAR} (not set)")
    path = cache_dir() / spec.name / file
    if path.is_file():
        return path
    looked.append(f"{path.parent} (cache)")
    try:
        _download(spec, file, path)
    except OSError as err:  # URLError and timeouts are OSErrors
        raise DatasetNotFoundError(
            f"dataset {spec.name!r} not found: looked in {', '.join(looked)} for {file}; "
            f"could not download it ({err}). Set {ENV_VAR} to the directory that holds "
            f"{spec.name}/"
        ) from err
    return path


def _download(spec: DatasetSpec, file: str, destination: Path) -> None:
    """Fetch ``file`` into ``destination``, atomically, if its sha256 is the expected one."""
    url = spec.file_url(file)
    if url is None:
        raise FileNotFoundError(f"{spec.name}: {NO_URL}")
    destination.parent.mkdir(parents=True, exist_ok=True)
    with urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
        chunks = iter(lambda: response.read(1 << 20), b"")
        atomic_write_chunks(destination, _checked(chunks, spec.sha256[file], url, destination))


def _checked(chunks: Iterator[bytes], sha256: str, url: str, destination: Path) -> Iterator[bytes]:
    """``chunks``, then a ``DataError`` if their sha256 is not ``sha256`` (so that the
    writer keeps nothing of them)."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
        yield chunk
    if digest.hexdigest() != sha256:
        raise DataError.at(
            destination,
            None,
            f"the download from {url} has sha256 {digest.hexdigest()}, expected {sha256}; "
            "it was deleted",
        )


def _check(what: str, value: str | None, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"unknown {what} {value!r}; expected one of {', '.join(valid)}")
