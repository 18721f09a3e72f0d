"""The pretraining corpus: documents of plain-text files and directories, the training text
of named datasets, the held-out slice, token files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scratchformer.data.corpus import (
    HELD_OUT_EVERY,
    NAMED_CORPORA,
    TokenFiles,
    corpus_documents,
    split_held_out,
)
from scratchformer.data.readers import DataError, iter_documents
from scratchformer.data.registry import DATASETS
from scratchformer.data.tokenizer import Tokenizer


def test_documents_are_separated_by_blank_lines_or_one_a_line(tmp_path: Path) -> None:
    text = tmp_path / "a.txt"
    text.write_text("first line\r\nof one\n\n\n  \nsecond\n")
    assert list(iter_documents(text)) == ["first line\nof one", "second"]
    assert list(iter_documents(text, per_line=True)) == ["first line", "of one", "second"]


def test_a_directory_is_read_file_by_file_in_sorted_order(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("bee\n")
    (tmp_path / "a.txt").write_text("ay\n\nay again\n")
    (tmp_path / ".hidden").write_text("never\n")
    assert list(iter_documents(tmp_path)) == ["ay", "ay again", "bee"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="empty: a directory with no files"):
        list(iter_documents(tmp_path / "empty"))


def test_malformed_text_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\n\xff\n")
    with pytest.raises(DataError, match=r"bad.txt:2: not valid UTF-8"):
        list(iter_documents(bad))


def test_named_corpora_are_the_training_text_only() -> None:
    contexts = list(NAMED_CORPORA["squad"](None))
    train = {q.context for q in DATASETS["squad"].examples("train")}
    assert len(contexts) == len(train) and set(contexts) == train
    assert not set(contexts) & {q.context for q in DATASETS["squad"].examples("val")}
    assert (
        next(NAMED_CORPORA["conll2003"](None)) == "EU rejects German call to boycott British lamb ."
    )
    with pytest.raises(ValueError, match=r"data\.pretraining\.corpus: 'imdb' must be one of t"):
        list(corpus_documents(["imdb"], []))


def test_the_held_out_slice_and_the_rest_partition_the_documents() -> None:
    documents = [f"d{i}" for i in range(3 * HELD_OUT_EVERY + 5)]
    held = list(split_held_out(documents, held_out=True))
    rest = list(split_held_out(documents, held_out=False))
    assert held == [f"d{i}" for i in range(HELD_OUT_EVERY - 1, len(documents), HELD_OUT_EVERY)]
    assert sorted(held + rest, key=documents.index) == documents


def test_token_files_hold_each_document_then_the_separator() -> None:
    tokenizer = Tokenizer.train("wordpiece", ["a b c"] * 5, 40, ["pad", "unk", "sep"])
    stream = TokenFiles().write(tokenizer, ["a b", "c"], [tokenizer.sep_id])
    expected = [*tokenizer.encode("a b"), tokenizer.sep_id, *tokenizer.encode("c"), 2]
    assert isinstance(stream.ids, np.memmap) and stream.ids.tolist() == expected
