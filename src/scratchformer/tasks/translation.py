"""Translation: an encoder-decoder model maps a source sentence to its target sentence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..data.batching import pad_batch
from ..data.readers import read_parallel
from ..data.registry import ParallelDataset, dataset_choice, named_dataset
from ..data.tokenizer import Tokenizer
from ..device import model_device
from ..errors import DataSettingsError
from ..inference.beam import beam_search, greedy_decode
from ..metrics import translation_scores
from ..nn.loss import IGNORE_INDEX
from ..predictions import BATCH_SIZE, BEAM_SIZE, LENGTH_PENALTY, TRANSLATE, Record
from .base import (
    Attentions,
    Batch,
    ExampleTask,
    Task,
    TokenLabels,
    progress_bar,
    register_task,
    warn_cut,
)

SPECIALS = ("pad", "unk", "bos", "eos")
"""The special tokens of a translation tokenizer whose decoder starts from bos (ours)."""

Pair = tuple[list[int], list[int]]
"""Source ids ending in eos; target ids between the decoder's start token and eos."""


@dataclass(frozen=True)
class Translation(Record):
    """A sentence's translation."""

    translation: str

    def line(self) -> str:
        return self.translation


def specials(decoder_start: str) -> tuple[str, ...]:
    """The special tokens of an encoder-decoder's tokenizer whose decoder starts from the
    token of role ``decoder_start``: :data:`SPECIALS`, without bos when it starts from pad
    (T5's layout)."""
    return tuple(role for role in SPECIALS if role != "bos" or decoder_start == "bos")


def start_id(tokenizer: Tokenizer, decoder_start: str) -> int:
    """The id of the token the decoder reads first (``model.decoder_start``)."""
    if decoder_start not in tokenizer.specials:
        raise ValueError(
            f"model.decoder_start={decoder_start!r}, but the tokenizer has no {decoder_start} "
            f"token (its specials: {', '.join(tokenizer.specials) or 'none'})"
        )
    return tokenizer.specials[decoder_start]


@register_task
class TranslationTask(ExampleTask):
    """Source ids (``data.translation.source_prefix`` and the sentence, with eos) feed the
    encoder; the decoder reads the target shifted right (its start token first: bos, or
    T5's pad) and predicts it shifted left (eos last). Padding is masked and ignored by the
    loss, which uses label smoothing as in the paper."""

    name = "translation"
    arch = "seq2seq"
    loss_in_forward = True
    metric = "loss"
    higher_is_better = False
    predicts = TRANSLATE

    def read(self, split: str, path: str | None = None) -> list[tuple[str, str]]:
        files = path.split(",") if path is not None else getattr(self.data, split, None)
        if files is not None:
            if isinstance(files, str) or len(files) != 2:
                where = f"data.{split}" if path is None else f"--data {path!r}"
                raise ValueError(f"{where} must list two files: source, target")
            return read_parallel(*files)
        dataset = named_dataset(self.data.dataset, ParallelDataset)
        if dataset is not None:
            if self.data.pair is None:
                raise DataSettingsError("data.pair must name the language pair, e.g. 'de-en'")
            return dataset.examples(self.data.pair, split, self.data.root)
        raise DataSettingsError(
            f"no {split} data: set {dataset_choice(ParallelDataset)} (with data.pair) "
            f"or data.{split} = [SOURCE_FILE, TARGET_FILE]"
        )

    def prepare(self) -> None:
        pairs = self.read("train")
        sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
        roles = specials(self.recipe.model.decoder_start)
        if self.data.translation.shared_vocab:
            self.tokenizers = {"tokenizer": self.train_tokenizer(sources + targets, roles)}
        else:
            self.tokenizers = {
                "tokenizer-src": self.train_tokenizer(sources, roles),
                "tokenizer-tgt": self.train_tokenizer(targets, roles),
            }

    def source_tokenizer(self) -> Tokenizer:
        return self.tokenizer("tokenizer" if "tokenizer" in self.tokenizers else "tokenizer-src")

    def target_tokenizer(self) -> Tokenizer:
        return self.tokenizer("tokenizer" if "tokenizer" in self.tokenizers else "tokenizer-tgt")

    def start_id(self) -> int:
        """The target token the decoder reads first: ``model.decoder_start``'s."""
        return start_id(self.target_tokenizer(), self.recipe.model.decoder_start)

    def encode_sources(self, texts: Sequence[str]) -> list[list[int]]:
        """The encoder's ids of source texts: ``data.translation.source_prefix`` and the
        text, then eos."""
        prefix = self.data.translation.source_prefix
        return self.source_tokenizer().encode_batch([prefix + t for t in texts], add_eos=True)

    def model_sizes(self) -> dict[str, Any]:
        sizes = {
            "vocab_size": self.source_tokenizer().vocab_size,
            "tgt_vocab_size": self.target_tokenizer().vocab_size,
        }
        if self.recipe.model.share_embeddings and not self.data.translation.shared_vocab:
            raise ValueError("model.share_embeddings needs data.translation.shared_vocab = true")
        return sizes

    def encode(self, raw: Sequence[tuple[str, str]]) -> list[Pair]:
        limit, start = self.data.max_len, self.start_id()
        sources = self.encode_sources([s for s, _ in raw])
        targets = self.target_tokenizer().encode_batch([t for _, t in raw], add_eos=True)
        return [
            (clip(s, limit), clip([start, *t], limit + 1))
            for s, t in zip(sources, targets, strict=True)
        ]

    def length(self, example: Pair) -> int:
        return max(len(example[0]), len(example[1]) - 1)

    def collate(self, examples: Sequence[Pair]) -> Batch:
        return seq2seq_batch(
            examples, self.source_tokenizer().pad_id, self.target_tokenizer().pad_id
        )

    @torch.no_grad()
    def translate(
        self,
        model: nn.Module,
        lines: Sequence[str],
        *,
        beam_size: int = BEAM_SIZE.default,
        length_penalty: float = LENGTH_PENALTY.default,
        batch_size: int = BATCH_SIZE.default,
        progress: bool = False,
        use_cache: bool = True,
    ) -> list[str]:
        """The translation of every line, batched by length, in input order. An empty line
        gives an empty line; a line longer than ``data.max_len`` tokens is cut to it, with a
        warning. Hypotheses may run to 50 tokens more than their source (the decoders'
        default), whatever the batch. ``use_cache=False`` decodes without the KV cache (for
        benchmarks)."""
        source, target = self.source_tokenizer(), self.target_tokenizer()
        limit, start_token = self.data.max_len, self.start_id()
        encoded = cut_to(self.encode_sources(lines), limit)
        todo = sorted(
            (i for i, line in enumerate(lines) if line.strip()), key=lambda i: len(encoded[i])
        )
        results = [""] * len(lines)
        device = model_device(model)
        bar = progress_bar(len(todo), progress)
        # a compiled model takes every batch at the first one's size (see CompiledModel)
        width = min(batch_size, len(todo)) if getattr(model, "is_compiled", False) else 0
        for start in range(0, len(todo), batch_size):
            rows = todo[start : start + batch_size]
            padded = rows + rows[-1:] * (width - len(rows))  # (copies of a row, then dropped)
            src_ids, src_mask = pad_batch([encoded[i] for i in padded], source.pad_id)
            src_ids, src_mask = src_ids.to(device), src_mask.to(device)
            if beam_size > 1:
                best = [
                    hypotheses[0].tokens
                    for hypotheses in beam_search(
                        model,
                        src_ids,
                        src_mask,
                        bos_id=start_token,
                        eos_id=target.eos_id,
                        beam_size=beam_size,
                        length_penalty=length_penalty,
                        use_cache=use_cache,
                    )
                ]
            else:
                best = greedy_decode(
                    model,
                    src_ids,
                    src_mask,
                    bos_id=start_token,
                    eos_id=target.eos_id,
                    use_cache=use_cache,
                )
            for i, tokens in zip(rows, best[: len(rows)], strict=True):
                results[i] = target.decode(tokens)
            bar.update(len(rows))
        bar.close()
        return results

    def records(
        self, model: nn.Module, inputs: list[str], *, progress: bool, **options: Any
    ) -> list[Translation]:
        """The translation of each text (``options``: those of :meth:`translate`)."""
        return [Translation(t) for t in self.translate(model, inputs, progress=progress, **options)]

    def decoding_metrics(
        self,
        model: nn.Module,
        split: str = "val",
        path: str | None = None,
        beam_size: int = BEAM_SIZE.default,
        progress: bool = False,
    ) -> dict[str, float]:
        """BLEU and chrF of the model's own translations, by beam search."""
        pairs = self.read(split, path)
        hypotheses = self.translate(
            model, [s for s, _ in pairs], beam_size=beam_size, progress=progress
        )
        return {**translation_scores(hypotheses, [t for _, t in pairs]), "beam": beam_size}

    def attention(
        self, model: nn.Module, text: str, target: str | None = None
    ) -> tuple[Attentions, TokenLabels]:
        """The source ``text`` against the output ``target`` (the model's own greedy
        translation when None); the decoder's queries are its inputs, its start token first."""
        if target is None:
            target = self.translate(model, [text], beam_size=1)[0]
        (pair,) = self.encode([(text, target)])
        return pair_attention(self, model, pair, self.source_tokenizer(), self.target_tokenizer())


def pair_attention(
    task: Task, model: nn.Module, pair: Pair, source: Tokenizer, target: Tokenizer
) -> tuple[Attentions, TokenLabels]:
    """The attention of an encoder-decoder ``model`` on one ``(source, target)`` pair as
    teacher forcing feeds it: every kind (encoder, decoder, cross), with the labels of the
    source tokens and of the decoder's inputs."""
    device = model_device(model)
    batch = seq2seq_batch([pair], source.pad_id, target.pad_id).to(device)
    inputs = source.labels(batch.inputs["src_ids"][0].tolist())
    outputs = target.labels(batch.inputs["tgt_ids"][0].tolist())
    tokens = {"encoder": (inputs, inputs), "decoder": (outputs, outputs)}
    tokens["cross"] = (outputs, inputs)
    return task.attend(model, batch.inputs), tokens


def seq2seq_batch(examples: Sequence[Pair], src_pad: int, tgt_pad: int) -> Batch:
    """A padded batch of ``(source, target)`` pairs for teacher forcing: the decoder reads
    the target but its last token (its start token first) and predicts it but its first (eos last);
    padding is masked and ignored by the loss."""
    src_ids, src_mask = pad_batch([s for s, _ in examples], src_pad)
    tgt_ids, tgt_mask = pad_batch([t[:-1] for _, t in examples], tgt_pad)
    targets, target_mask = pad_batch([t[1:] for _, t in examples], tgt_pad)
    targets = targets.masked_fill(~target_mask, IGNORE_INDEX)
    inputs = {"src_ids": src_ids, "tgt_ids": tgt_ids, "src_mask": src_mask, "tgt_mask": tgt_mask}
    return Batch(inputs, targets, int(target_mask.sum()) + int(src_mask.sum()))


def clip(ids: list[int], limit: int) -> list[int]:
    """At most ``limit`` ids, keeping the last one (eos)."""
    return ids if len(ids) <= limit else ids[: limit - 1] + ids[-1:]


def cut_to(lines: Sequence[list[int]], limit: int) -> list[list[int]]:
    """Each input line's ids cut to ``limit`` (:func:`clip`), with a warning that numbers
    the lines cut."""
    warn_cut([i + 1 for i, ids in enumerate(lines) if len(ids) > limit], limit)
    return [clip(ids, limit) for ids in lines]
