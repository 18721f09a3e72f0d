"""Span-corruption pretraining (T5's objective) of an encoder-decoder on a text corpus.

The corpus (:mod:`scratchformer.data.corpus`) is encoded once into a memory-mapped token
stream, documents running on as T5 packs them. A training example is a random window of
the stream, as long as fits ``data.max_len`` once corrupted
(:func:`~scratchformer.data.noise.raw_length`), with random spans hidden afresh for every
batch (:mod:`scratchformer.data.noise`): the encoder reads the window with a sentinel for
each span, and the decoder, teacher-forced as in translation, predicts the spans after
their sentinels. Evaluation walks the held-out stream in consecutive windows, the same
spans hidden at every evaluation, and reports the loss and accuracy on the targets.
A trained model fills the sentinels (``<extra_id_0>``, ...) of a text greedily
(``scratchformer fill-spans``), and shows its attention on such a text.

The tokenizer (with ``data.span_corruption.sentinels`` sentinels and translation's specials) is one
vocabulary for both sides, so that a translation fine-tune (``train.init_from``) reads and
writes with it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data.batching import consecutive_windows, pad_batch, random_windows
from ..data.noise import corrupt, noise_counts, random_spans_noise_mask, raw_length
from ..data.tokenizer import SENTINEL
from ..device import model_device
from ..inference.beam import greedy_decode
from ..predictions import FILL_SPANS, Record
from .base import Attentions, Batch, TokenLabels, per_line, progress_bar, register_task
from .corpus import CorpusTask
from .translation import cut_to, pair_attention, seq2seq_batch, specials, start_id

EVAL_SEED = 2**31 - 1
"""Seeds the noise of evaluation batches: the same spans hidden at every evaluation."""


@dataclass(frozen=True)
class Spans(Record):
    """The span the model writes for each sentinel of a text, in the text's order (a
    sentinel it leaves out: empty)."""

    spans: list[str]

    def line(self) -> str:
        return "\t".join(self.spans)


@register_task
class SpanCorruptionTask(CorpusTask):
    """Pretrain an encoder-decoder to write out the spans hidden from its input."""

    name = "span_corruption"
    arch = "seq2seq"
    metric = "loss"
    higher_is_better = False
    loss_in_forward = True
    predicts = FILL_SPANS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        noise, max_len = self.data.span_corruption, self.data.max_len
        self.window = raw_length(max_len, noise.noise_density, noise.mean_span_length)
        """Tokens of the corpus in an example: as many as fit ``data.max_len`` corrupted."""
        spans = noise_counts(self.window, noise.noise_density, noise.mean_span_length)[1]
        if spans > noise.sentinels:
            raise ValueError(
                f"[data.span_corruption] sentinels={noise.sentinels} is fewer than the {spans} "
                f"spans hidden in an input of max_len={max_len} tokens"
            )

    # -- data --------------------------------------------------------------------------

    def prepare(self) -> None:
        texts = self.documents("train")
        roles = specials(self.recipe.model.decoder_start)
        tokenizer = self.train_tokenizer(
            texts, roles, sentinels=self.data.span_corruption.sentinels
        )
        self.tokenizers = {"tokenizer": tokenizer}

    def model_sizes(self) -> dict[str, Any]:
        vocab_size = self.tokenizer().vocab_size
        return {"vocab_size": vocab_size, "tgt_vocab_size": vocab_size}

    def corrupted(self, windows: np.ndarray, generator: torch.Generator) -> Batch:
        """The windows with spans hidden by ``generator``'s draws, as ``(input, target)``
        pairs of a seq2seq batch."""
        tokenizer, options = self.tokenizer(), self.data.span_corruption
        start = start_id(tokenizer, self.recipe.model.decoder_start)
        pairs = []
        for ids in windows.tolist():
            noise = random_spans_noise_mask(
                len(ids), options.noise_density, options.mean_span_length, generator
            )
            inputs, targets = corrupt(ids, noise, tokenizer.sentinel_ids, tokenizer.eos_id)
            pairs.append((inputs, [start, *targets]))
        return seq2seq_batch(pairs, tokenizer.pad_id, tokenizer.pad_id)

    def global_batch(self, index: int, parts: int) -> Batch:
        generator = torch.Generator().manual_seed(self.train_config.seed * 1_000_003 + index)
        size = self.train_config.batch_size * parts
        windows = random_windows(self.stream("train"), size, self.window, generator)
        return self.corrupted(windows, generator)

    def eval_batches(self, split: str, path: str | None = None) -> Iterator[Batch]:
        windows = consecutive_windows(
            self.stream(split, path), self.train_config.batch_size, self.window
        )
        for i, batch in enumerate(windows):
            if batch.shape[1] >= 2:  # a last window of one token has nothing to hide
                yield self.corrupted(batch, torch.Generator().manual_seed(EVAL_SEED + i))

    # -- inference ---------------------------------------------------------------------

    def start_id(self) -> int:
        """The token the decoder reads first: ``model.decoder_start``'s."""
        return start_id(self.tokenizer(), self.recipe.model.decoder_start)

    def encode_input(self, text: str) -> list[int]:
        """The encoder's ids of ``text``: each ``<extra_id_N>`` in it sentinel N, then eos
        (not yet cut to ``data.max_len``)."""
        tokenizer = self.tokenizer()
        ids = [*tokenizer.encode_sentinels(text), tokenizer.eos_id]
        if not set(ids) & set(tokenizer.sentinel_ids):
            first = SENTINEL.format(0)
            raise ValueError(f"no {first} in {text!r}: mark the spans to fill with {first}, ...")
        return ids

    def fill(
        self, model: nn.Module, inputs: Sequence[list[int]], progress: bool = False
    ) -> list[list[int]]:
        """The model's greedy output for each input (:meth:`encode_input`), 64 at a time:
        each sentinel followed by the span it fills, without the start token and eos."""
        tokenizer, start_token = self.tokenizer(), self.start_id()
        device = model_device(model)
        outputs: list[list[int]] = []
        with progress_bar(len(inputs), progress) as bar:
            for offset in range(0, len(inputs), 64):
                ids, mask = pad_batch(inputs[offset : offset + 64], tokenizer.pad_id)
                outputs += greedy_decode(
                    model,
                    ids.to(device),
                    mask.to(device),
                    bos_id=start_token,
                    eos_id=tokenizer.eos_id,
                )
                bar.update(len(ids))
        return outputs

    def records(self, model: nn.Module, inputs: list[str], *, progress: bool) -> list[Spans]:
        """The spans the model writes for the sentinels of each text."""
        tokenizer = self.tokenizer()
        sentinels = set(tokenizer.sentinel_ids)
        encoded = cut_to(per_line(inputs, self.encode_input), self.data.max_len)
        results = []
        for ids, output in zip(encoded, self.fill(model, encoded, progress), strict=True):
            spans = split_spans(output, sentinels)
            asked = [i for i in ids if i in sentinels]
            results.append(Spans([tokenizer.decode(spans.get(i, [])) for i in asked]))
        return results

    def example(self, text: str) -> str:
        """``text`` with a span to fill."""
        return f"{text} {SENTINEL.format(0)}"

    def attention(
        self, model: nn.Module, text: str, target: str | None = None
    ) -> tuple[Attentions, TokenLabels]:
        """The ``text`` with its sentinels (``<extra_id_N>``) as the encoder's input; as
        the decoder's, ``target`` (the spans after their sentinels, ``<extra_id_0> ...
        <extra_id_1> ...``), or the model's own greedy fill when None. The decoder's
        queries are its inputs, its start token first."""
        tokenizer = self.tokenizer()
        (source,) = cut_to([self.encode_input(text)], self.data.max_len)
        if target is None:
            output = self.fill(model, [source])[0]
        else:
            output = tokenizer.encode_sentinels(target)
        pair = (source, [self.start_id(), *output, tokenizer.eos_id])
        return pair_attention(self, model, pair, tokenizer, tokenizer)


def split_spans(output: Sequence[int], sentinels: set[int]) -> dict[int, list[int]]:
    """The tokens after each sentinel of a decoder's ``output``, up to the next one."""
    spans: dict[int, list[int]] = {}
    span: list[int] = []  # tokens before the first sentinel belong to no span
    for token in output:
        if token in sentinels:
            span = spans[token] = []
        else:
            span.append(token)
    return spans
