"""The base of the tasks that read a text corpus (``lm``, ``mlm``, ``span_corruption``):
which documents a split holds, and their token stream, encoded once."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..data.batching import TokenStream
from ..data.corpus import TokenFiles, corpus_documents, split_held_out
from ..data.readers import iter_documents
from .base import Task


class CorpusTask(Task):
    """A task whose examples are windows of a corpus's token stream."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._streams: dict[tuple[str, str | None], TokenStream] = {}
        self._token_files = TokenFiles()

    def documents(self, split: str, path: str | None = None) -> Iterable[str]:
        """The documents of a split: ``path``, or ``data.<split>`` files; else, for train
        and val, the corpus (``data.pretraining.corpus`` and ``data.train``) less or only
        its held-out slice."""
        data = self.data
        per_line = data.pretraining.document_per_line
        if path is not None:
            return iter_documents(path, per_line)
        if split != "train" and getattr(data, split) is not None:
            return corpus_documents([], _files(getattr(data, split)), per_line=per_line)
        if split == "test":
            raise ValueError("no test text: set data.test to a file or directory")
        if not data.pretraining.corpus and data.train is None:
            raise ValueError(
                "no corpus: set data.pretraining.corpus to named datasets or data.train to files"
            )
        corpus = corpus_documents(
            data.pretraining.corpus or [], _files(data.train), per_line=per_line, root=data.root
        )
        if split == "train" and data.val is not None:
            return corpus
        return split_held_out(corpus, held_out=split != "train")

    def separator(self) -> list[int]:
        """The token ids that follow each document in a stream (none: documents run on)."""
        return []

    def stream(self, split: str, path: str | None = None) -> TokenStream:
        """The token ids of a split, each document followed by :meth:`separator`: encoded
        once."""
        key = (split, path)
        if key not in self._streams:
            documents = self.documents(split, path)
            self._streams[key] = self._token_files.write(
                self.tokenizer(), documents, self.separator()
            )
        return self._streams[key]


def _files(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)
