"""A chat run's own greedy answers to many conversations at once, in batches through the
decoding engine: what ``make-chat-data --rejected-from RUN`` sets against the gold answers
to make on-policy preference pairs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from ..data.chat import DEFAULT_TEMPLATE, Message, prompt_ids
from ..opening import load_run
from ..tasks.base import progress_bar
from .generate import generate

BATCH = 32
"""Conversations decoded together: rows of one engine."""


def chat_answers(
    run_dir: Path,
    conversations: Sequence[Sequence[Message]],
    max_new_tokens: Sequence[int],
    device: torch.device | None = None,
    batch_size: int = BATCH,
    shown: bool = True,
) -> list[str | None]:
    """The answer of ``run_dir``'s language model to each conversation, greedy, at most
    ``max_new_tokens[i]`` tokens, ended by the eos token, as ``serve`` answers a chat
    completion at temperature 0 (the run's chat template, or the default one for a run
    without). A conversation too long for the model's context with its answer gets None.
    Conversations of similar lengths are decoded together, on ``device`` (default: the
    CPU), in the caller's precision; ``shown``: a progress bar."""
    if len(max_new_tokens) != len(conversations):
        raise ValueError("give max_new_tokens for each conversation")
    task, model = load_run(Path(run_dir))
    if not task.decodes:
        raise ValueError(f"{run_dir} is a {task.name!r} run: answers need a language model")
    model = model.to(device or "cpu")
    tokenizer = task.tokenizer()
    template = task.chat_template or DEFAULT_TEMPLATE
    prompts = [prompt_ids(template, chat, tokenizer) for chat in conversations]
    fits = [
        i
        for i, prompt in enumerate(prompts)
        if len(prompt) + max_new_tokens[i] <= model.config.max_len
    ]
    fits.sort(key=lambda i: (max_new_tokens[i], len(prompts[i])))
    answers: list[str | None] = [None] * len(prompts)
    with torch.no_grad(), progress_bar(len(fits), shown) as bar:
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
