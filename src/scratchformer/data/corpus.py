"""A pretraining corpus: documents from plain-text files and directories and from the
training text of named datasets, encoded once into a memory-mapped token file.

Only the training splits of named datasets are ever read, so that a model pretrained on
them can be fine-tuned and judged on their validation splits. The held-out slice that
pretraining reports on is every :data:`HELD_OUT_EVERY`-th document, kept out of training.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from ..caches import cache_dir
from ..io import atomic_write_chunks
from .batching import TokenStream, token_dtype
from .readers import iter_documents
from .registry import DATASETS, Documents, Root
from .tokenizer import Tokenizer

HELD_OUT_EVERY = 100
"""One document in this many is held out of training, for the held-out metrics."""
ENCODE_DOCUMENTS = 10_000
"""Documents encoded at a time on the way to a token file."""

NAMED_CORPORA: dict[str, Documents] = {
    name: documents
    for _, dataset in DATASETS.items()
    for name, documents in dataset.corpora().items()
}
"""``data.pretraining.corpus`` names -> the documents of that dataset's training split, as each
dataset gives them: a sentence (SST-2, STS-B, CoNLL, Multi30k), a paragraph (SQuAD
contexts), a speech (shakespeare)."""


def corpus_documents(
    names: Sequence[str],
    files: Sequence[str],
    *,
    per_line: bool = False,
    root: Root = None,
) -> Iterator[str]:
    """The documents of the named corpora (:data:`NAMED_CORPORA`), then of ``files``
    (plain-text files or directories, see
    :func:`~scratchformer.data.readers.iter_documents`), streamed."""
    for name in names:
        if name not in NAMED_CORPORA:
            raise ValueError(
                f"data.pretraining.corpus: {name!r} must be one of {', '.join(NAMED_CORPORA)}"
            )
        yield from NAMED_CORPORA[name](root)
    for file in files:
        yield from iter_documents(file, per_line)


def split_held_out(documents: Iterable[str], held_out: bool) -> Iterator[str]:
    """Every :data:`HELD_OUT_EVERY`-th document (``held_out``), or all the others."""
    for index, document in enumerate(documents):
        if (index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1) == held_out:
            yield document


class TokenFiles:
    """Token files of encoded text in a private folder of the user cache, memory-mapped;
    the folder is removed with this object (or at exit)."""

    def __init__(self) -> None:
        self._directory: Path | None = None
        self._count = 0

    def write(
        self, tokenizer: Tokenizer, texts: Iterable[str], after: Sequence[int] = ()
    ) -> TokenStream:
        """The token ids of ``texts`` one after another, each followed by ``after`` (a
        separator between documents), as a memory-mapped stream."""
        dtype = token_dtype(tokenizer.vocab_size)
        file = self.directory() / f"tokens-{self._count}.bin"
        self._count += 1
        atomic_write_chunks(file, _encoded(tokenizer, texts, list(after), dtype))
        return TokenStream.open(file, dtype)

    def directory(self) -> Path:
        if self._directory is None:
            cache_dir().mkdir(parents=True, exist_ok=True)
            self._directory = Path(tempfile.mkdtemp(prefix="tokens-", dir=cache_dir()))
            weakref.finalize(self, shutil.rmtree, self._directory, ignore_errors=True)
        return self._directory


def _encoded(
    tokenizer: Tokenizer, texts: Iterable[str], after: list[int], dtype: np.dtype
) -> Iterator[bytes]:
    """The token ids of ``texts`` as ``dtype`` bytes, encoded ``ENCODE_DOCUMENTS`` at a time."""
    texts = iter(texts)
    while chunk := list(itertools.islice(texts, ENCODE_DOCUMENTS)):
        ids = (token for encoded in tokenizer.encode_batch(chunk) for token in encoded + after)
        yield np.fromiter(ids, dtype=dtype).tobytes()
