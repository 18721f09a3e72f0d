"""Translate lines of text with a trained encoder-decoder: batched by length, beam search
(or greedy), output in input order, one line out per line in."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

import torch
from torch import nn
from tqdm import tqdm

from ..data.batching import pad_batch
from ..tasks.translation import TranslationTask, clip
from .beam import beam_search, greedy_decode


@torch.no_grad()
def translate(
    task: TranslationTask,
    model: nn.Module,
    lines: Sequence[str],
    *,
    beam_size: int = 5,
    length_penalty: float = 0.6,
    batch_size: int = 64,
    progress: bool = False,
    use_cache: bool = True,
) -> list[str]:
    """The translation of every line. An empty line gives an empty line; a line longer than
    the model's ``data.max_len`` tokens is cut to it, with a warning. Hypotheses may run to
    50 tokens more than their source (the decoders' default), whatever the batch.
    ``use_cache=False`` decodes without the KV cache (for benchmarks)."""
    source, target = task.source_tokenizer(), task.target_tokenizer()
    limit = task.data.max_len
    encoded = source.encode_batch(list(lines), add_eos=True)
    too_long = [i + 1 for i, ids in enumerate(encoded) if len(ids) > limit]
    if too_long:
        shown = ", ".join(map(str, too_long[:5])) + (" ..." if len(too_long) > 5 else "")
        warnings.warn(
            f"{len(too_long)} line(s) longer than {limit} tokens were cut (line {shown})",
            stacklevel=2,
        )
    encoded = [clip(ids, limit) for ids in encoded]
    todo = sorted(
        (i for i, line in enumerate(lines) if line.strip()), key=lambda i: len(encoded[i])
    )
    results = [""] * len(lines)
    device = next(model.parameters()).device
    bar = tqdm(total=len(todo), disable=not progress, file=sys.stderr, unit="line")
    for start in range(0, len(todo), batch_size):
        rows = todo[start : start + batch_size]
        src_ids, src_mask = pad_batch([encoded[i] for i in rows], source.pad_id)
        src_ids, src_mask = src_ids.to(device), src_mask.to(device)
        if beam_size > 1:
            best = [
                hypotheses[0].tokens
                for hypotheses in beam_search(
                    model,
                    src_ids,
                    src_mask,
                    bos_id=target.bos_id,
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
                bos_id=target.bos_id,
                eos_id=target.eos_id,
                use_cache=use_cache,
            )
        for i, tokens in zip(rows, best, strict=True):
            results[i] = target.decode(tokens)
        bar.update(len(rows))
    bar.close()
    return results
