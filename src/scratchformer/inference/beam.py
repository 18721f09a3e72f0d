"""Decoding for the encoder-decoder Transformer: greedy decoding and beam search.

Both encode the batch once, then run one cached decoder step per target position for all
rows at once. The rows stay to the end: a finished sentence's rows go on being fed a token
whose outputs are ignored. So the decoder's shapes never change during a search, and a
:class:`~.compiled.CompiledModel` runs every step with the same compiled code.

Lengths count generated target tokens, the eos token included (BOS is fed, not
generated). ``max_len`` caps them; its default is, per sentence, the source length (real
tokens) + 50, capped at the model's ``max_len``, so a sentence decodes the same whichever
batch it is in.

Beam search scores a hypothesis as in GNMT (Wu et al., 2016):
``score = log_prob / lp(length)`` with ``lp(length) = ((5 + length) / 6) ** alpha``, where
``log_prob`` is the summed log-probability of its tokens (eos included, if it ends in one).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..device import decoding_device
from .cache import SPARE, DecoderCache
from .kernels import decoding_kernels

EXTRA_LENGTH = 50  # default max_len: source length + this


@dataclass
class Hypothesis:
    """A finished beam: ``tokens`` without BOS and eos; ``score = log_prob / lp(length)``."""

    tokens: list[int]
    score: float
    log_prob: float


def gnmt_penalty(length: int, alpha: float) -> float:
    """GNMT's ``((5 + length) / 6) ** alpha``; ``alpha = 0`` ranks by log-probability."""
    return ((5 + length) / 6) ** alpha


class Finished:
    """The best ``size`` finished hypotheses of one sentence, best first."""

    def __init__(self, size: int, alpha: float) -> None:
        self.size = size
        self.alpha = alpha
        self.hypotheses: list[Hypothesis] = []

    def add(self, tokens: list[int], log_prob: float, length: int) -> None:
        score = log_prob / gnmt_penalty(length, self.alpha)
        self.hypotheses.append(Hypothesis(tokens, score, log_prob))
        self.hypotheses.sort(key=lambda h: h.score, reverse=True)
        del self.hypotheses[self.size :]

    def is_done(self, best_live: float, length: int, max_len: int, early_stopping: bool) -> bool:
        """Whether the search of this sentence can stop, its live beams having ``length``
        tokens and the best of them the log-probability ``best_live``. It needs ``size``
        finished hypotheses; then ``early_stopping`` stops at once (as fairseq and Hugging
        Face do), and otherwise the search goes on while a live beam could still beat the
        worst finished one: log-probabilities only fall, so the best a live beam can reach
        is ``best_live / lp(L)`` for the most favourable length ``L`` still possible (the
        largest ``lp`` of ``length + 1`` and ``max_len``, as ``lp`` is monotonic)."""
        if len(self.hypotheses) < self.size:
            return False
        if early_stopping:
            return True
        best_lp = max(gnmt_penalty(length + 1, self.alpha), gnmt_penalty(max_len, self.alpha))
        return self.hypotheses[-1].score >= best_live / best_lp


def length_limits(model: nn.Module, src_mask: Tensor, max_len: int | None) -> list[int]:
    """The most target tokens each sentence may generate (see the module docstring)."""
    if max_len is not None:
        return [max_len] * src_mask.shape[0]
    lengths = src_mask.sum(dim=1) + EXTRA_LENGTH
    return lengths.clamp(max=model.config.max_len).tolist()


def encode_source(
    model: nn.Module, src_ids: Tensor, src_mask: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The encoder output and the source mask (all True if None), on the model's device."""
    device = decoding_device(model)
    src_ids = src_ids.to(device)
    src_mask = torch.ones_like(src_ids, dtype=torch.bool) if src_mask is None else src_mask
    src_mask = src_mask.to(device).bool()
    memory, _ = model.encode(src_ids, src_mask)
    return memory, src_mask


@torch.no_grad()
def greedy_decode(
    model: nn.Module,
    src_ids: Tensor,
    src_mask: Tensor | None = None,
    *,
    bos_id: int,
    eos_id: int,
    max_len: int | None = None,
    use_cache: bool = True,
) -> list[list[int]]:
    """The most likely next token at each step, for every sentence of the batch
    ``src_ids`` ``(batch, src_len)``; returns the tokens without BOS and eos.
    ``use_cache=False`` recomputes the whole target prefix every step (tests, benchmarks)."""
    memory, src_mask = encode_source(model, src_ids, src_mask)
    limits = length_limits(model, src_mask, max_len)
    cache = DecoderCache(model.decoder, len(limits), max(limits) + SPARE) if use_cache else None
    outputs: list[list[int]] = [[] for _ in limits]
    done = [False] * len(limits)
    tokens = torch.full((len(limits), 1), bos_id, device=memory.device)
    prefix = tokens  # the whole target so far: the decoder's input when there is no cache
    with decoding_kernels(model, len(limits)):
        for step in range(1, max(limits) + 1):
            fed = tokens if cache is not None else prefix
            logits = model.decode(fed, memory, src_mask, cache=cache)[0][:, -1]
            tokens = logits.argmax(dim=-1, keepdim=True)
            if cache is None:
                prefix = torch.cat([prefix, tokens], dim=1)
            for row, token in enumerate(tokens[:, 0].tolist()):
                if done[row]:
                    continue
                if token != eos_id:
                    outputs[row].append(token)
                done[row] = token == eos_id or step == limits[row]
            if all(done):
                break
    return outputs


@torch.no_grad()
def beam_search(
    model: nn.Module,
    src_ids: Tensor,
    src_mask: Tensor | None = None,
    *,
    bos_id: int,
    eos_id: int,
    beam_size: int = 5,
    max_len: int | None = None,
    length_penalty: float = 0.6,
    early_stopping: bool = True,
    n_best: int = 1,
    use_cache: bool = True,
) -> list[list[Hypothesis]]:
    """The ``n_best`` best hypotheses of each sentence of ``src_ids`` ``(batch, src_len)``,
    best first, by beam search with GNMT's length penalty (``alpha = length_penalty``).

    Every sentence keeps ``beam_size`` live beams (rows of one decoder batch). Each step
    ranks the ``2 * beam_size`` best extensions of a sentence's beams by log-probability;
    in that order, an extension by eos becomes a finished hypothesis if it ranks among the
    first ``beam_size`` (it would have held a beam), and the others fill the beams until
    there are ``beam_size``. A sentence is done when :meth:`Finished.is_done` says so (see
    there for ``early_stopping``); at its max length its live beams are finished as they
    are. ``use_cache=False`` recomputes every beam's whole prefix each step, for tests and
    benchmarks.

    Sentence ``i`` has the rows ``i * beam_size`` to ``(i + 1) * beam_size - 1`` of the
    decoder batch from start to end (a done sentence's are fed BOS): a beam never moves to
    another sentence's rows, so the encoder output and the cross-attention cache, the same
    in all rows of a sentence, are never reordered. They are kept once per sentence, not
    per beam: the search installs the decoding kernels, whose cross-attention lets the beams
    of a sentence share them (:class:`~.kernels.DecodingAttention`), reading them once a
    step.
    """
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best={n_best} must be between 1 and beam_size={beam_size}")
    memory, src_mask = encode_source(model, src_ids, src_mask)
    limits = length_limits(model, src_mask, max_len)
    k, rows = beam_size, len(limits) * beam_size
    cache = DecoderCache(model.decoder, rows, max(limits) + SPARE) if use_cache else None
    finished = [Finished(k, length_penalty) for _ in limits]
    active = list(range(len(limits)))  # sentences still searching
    history: list[list[int]] = [[] for _ in range(rows)]  # tokens of each beam
    scores = torch.full((len(limits), k), float("-inf"), device=memory.device)
    scores[:, 0] = 0.0  # all beams start as BOS: keep one, or each hypothesis comes k times
    tokens = torch.full((rows, 1), bos_id, device=memory.device)
    with decoding_kernels(model, rows):
        for step in range(1, max(limits) + 1):
            if cache is None:  # every beam's whole prefix, recomputed
                tokens = torch.tensor([[bos_id, *beam] for beam in history], device=memory.device)
            logits = model.decode(tokens, memory, src_mask, cache=cache)[0][:, -1]
            total = logits.log_softmax(dim=-1, dtype=torch.float32).add_(scores.view(-1, 1))
            vocab = total.shape[-1]
            top, index = total.view(len(limits), k * vocab).topk(min(2 * k, k * vocab), dim=1)
            top_log_probs, top_index = top.tolist(), index.tolist()
            # (row, token, log_prob) of the next beams; a done sentence's rows stay as they are
            keep = [(row, bos_id, float("-inf")) for row in range(rows)]
            still_active = []
            for i in active:
                beams: list[tuple[int, int, float]] = []
                for rank, (log_prob, j) in enumerate(
                    zip(top_log_probs[i], top_index[i], strict=True)
                ):
                    if log_prob == float("-inf") or len(beams) == k:
                        break
                    row, token = i * k + j // vocab, j % vocab
                    if token != eos_id:
                        beams.append((row, token, log_prob))
                    elif rank < k:
                        finished[i].add(history[row], log_prob, step)
                if step == limits[i]:
                    for row, token, log_prob in beams:
                        finished[i].add([*history[row], token], log_prob, step)
                elif beams and not finished[i].is_done(
                    beams[0][2], step, limits[i], early_stopping
                ):
                    # fewer than k live beams (early steps, tiny vocabularies): fill with dead ones
                    dead = [(beams[0][0], bos_id, float("-inf"))] * (k - len(beams))
                    keep[i * k : (i + 1) * k] = beams + dead
                    still_active.append(i)
            if not still_active:
                break
            if cache is not None:
                cache.reorder(torch.tensor([row for row, _, _ in keep], device=memory.device))
            history = [[*history[row], token] for row, token, _ in keep]
            tokens = torch.tensor([[token] for _, token, _ in keep], device=memory.device)
            scores = torch.tensor([s for _, _, s in keep], device=memory.device).view(-1, k)
            active = still_active
    return [f.hypotheses[:n_best] for f in finished]
