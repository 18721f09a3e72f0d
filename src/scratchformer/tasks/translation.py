"""Translation: an encoder-decoder model maps a source sentence to its target sentence."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..data.batching import pad_batch
from ..data.readers import read_parallel
from ..data.registry import parallel_examples
from ..data.tokenizer import Tokenizer
from ..nn.loss import IGNORE_INDEX
from .base import Batch, ExampleTask

SPECIALS = ("pad", "unk", "bos", "eos")
SPLIT_FILES = {"train": "train", "val": "val", "test": "test_2016_flickr"}
"""Multi30k's names of the standard splits (test: the 2016 Flickr test set)."""

Pair = tuple[list[int], list[int]]
"""Source ids ending in eos; target ids between bos and eos."""


class TranslationTask(ExampleTask):
    """Source ids (with eos) feed the encoder; the decoder reads the target shifted right
    (bos first) and predicts it shifted left (eos last). Padding is masked and ignored by
    the loss, which uses label smoothing as in the paper."""

    name = "translation"
    arch = "seq2seq"
    metric = "loss"
    higher_is_better = False

    def read(self, split: str, path: str | None = None) -> list[tuple[str, str]]:
        files = path.split(",") if path is not None else getattr(self.data, split, None)
        if files is not None:
            if isinstance(files, str) or len(files) != 2:
                raise ValueError(f"data.{split} must list two files: source, target")
            return read_parallel(*files)
        if self.data.dataset == "multi30k":
            if self.data.pair is None:
                raise ValueError("data.pair must name the language pair, e.g. 'de-en'")
            return parallel_examples(self.data.pair, SPLIT_FILES.get(split, split), self.data.root)
        raise ValueError(
            f"no {split} data: set data.dataset = 'multi30k' (with data.pair) "
            f"or data.{split} = [SOURCE_FILE, TARGET_FILE]"
        )

    def prepare(self) -> None:
        pairs = self.read("train")
        sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
        if self.data.shared_vocab:
            self.tokenizers = {"tokenizer": self.train_tokenizer(sources + targets, SPECIALS)}
        else:
            self.tokenizers = {
                "tokenizer-src": self.train_tokenizer(sources, SPECIALS),
                "tokenizer-tgt": self.train_tokenizer(targets, SPECIALS),
            }

    def source_tokenizer(self) -> Tokenizer:
        return self.tokenizer("tokenizer" if "tokenizer" in self.tokenizers else "tokenizer-src")

    def target_tokenizer(self) -> Tokenizer:
        return self.tokenizer("tokenizer" if "tokenizer" in self.tokenizers else "tokenizer-tgt")

    def model_sizes(self) -> dict[str, Any]:
        sizes = {
            "vocab_size": self.source_tokenizer().vocab_size,
            "tgt_vocab_size": self.target_tokenizer().vocab_size,
        }
        if self.recipe.model.share_embeddings and not self.data.shared_vocab:
            raise ValueError("model.share_embeddings needs data.shared_vocab = true")
        return sizes

    def encode(self, raw: Sequence[tuple[str, str]]) -> list[Pair]:
        limit = self.data.max_len
        sources = self.source_tokenizer().encode_batch([s for s, _ in raw], add_eos=True)
        targets = self.target_tokenizer().encode_batch(
            [t for _, t in raw], add_bos=True, add_eos=True
        )
        return [(clip(s, limit), clip(t, limit + 1)) for s, t in zip(sources, targets, strict=True)]

    def length(self, example: Pair) -> int:
        return max(len(example[0]), len(example[1]) - 1)

    def collate(self, examples: Sequence[Pair]) -> Batch:
        pad = self.target_tokenizer().pad_id
        src_ids, src_mask = pad_batch([s for s, _ in examples], self.source_tokenizer().pad_id)
        tgt_ids, tgt_mask = pad_batch([t[:-1] for _, t in examples], pad)
        targets, target_mask = pad_batch([t[1:] for _, t in examples], pad)
        targets = targets.masked_fill(~target_mask, IGNORE_INDEX)
        inputs = {
            "src_ids": src_ids,
            "tgt_ids": tgt_ids,
            "src_mask": src_mask,
            "tgt_mask": tgt_mask,
        }
        return Batch(inputs, targets, int(target_mask.sum()) + int(src_mask.sum()))


def clip(ids: list[int], limit: int) -> list[int]:
    """At most ``limit`` ids, keeping the last one (eos)."""
    return ids if len(ids) <= limit else ids[: limit - 1] + ids[-1:]
