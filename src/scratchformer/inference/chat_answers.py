"""A chat model's own greedy answers to many conversations at once, in batches through the
decoding engine: what ``make-chat-data --rejected-from RUN`` sets against the gold answers
to make on-policy preference pairs."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch
from torch import nn
from tqdm import tqdm

from ..data.chat import Message, prompt_ids
from ..data.tokenizer import Tokenizer
from .generate import generate

BATCH = 32
"""Conversations decoded together: rows of one engine."""


def chat_answers(
    model: nn.Module,
    tokenizer: Tokenizer,
    template: str,
    conversations: Sequence[Sequence[Message]],
    max_new_tokens: Sequence[int],
    batch_size: int = BATCH,
    shown: bool = True,
) -> list[str | None]:
    """The answer of the language ``model`` (in eval mode) to each conversation rendered by
    ``template``: greedy, at most ``max_new_tokens[i]`` tokens, ended by the eos token, as
    ``serve`` answers a chat completion at temperature 0. A conversation too long for the
    model's context with its answer gets None. Conversations of similar lengths are decoded
    together, in the caller's precision; ``shown``: a progress bar."""
    if len(max_new_tokens) != len(conversations):
        raise ValueError("give max_new_tokens for each conversation")
    prompts = [prompt_ids(template, chat, tokenizer) for chat in conversations]
    context = model.config.max_len
    fits = [i for i, prompt in enumerate(prompts) if len(prompt) + max_new_tokens[i] <= context]
    fits.sort(key=lambda i: (max_new_tokens[i], len(prompts[i])))
    answers: list[str | None] = [None] * len(prompts)
    bar = tqdm(total=len(fits), disable=not shown, file=sys.stderr, unit="answer")
    with torch.no_grad(), bar:
        for start in range(0, len(fits), batch_size):
            batch = fits[start : start + batch_size]
            new = generate(
                model,
                [prompts[i] for i in batch],
                max_new_tokens=max(max_new_tokens[i] for i in batch),
                greedy=True,
                eos_id=tokenizer.eos_id,
            )
            for i, ids in zip(batch, new, strict=True):
                # greedy rows are independent: a row cut at its own limit is its own answer
                answers[i] = tokenizer.decode(ids[: max_new_tokens[i]]).strip()
            bar.update(len(batch))
    return answers
