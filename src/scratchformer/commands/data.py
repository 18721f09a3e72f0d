"""``scratchformer make-chat-data``: instructions from the named datasets, for ``sft`` and
``dpo``."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ..data.chat import DEFAULT_TEMPLATE
from ..data.instructions import (
    ANSWER_TOKENS,
    SOURCES,
    ChatSet,
    Generated,
    chat_set,
    chats,
    own_mistakes,
    write_chat_set,
)
from ..device import default_device
from ..errors import UsageError
from ..inference.chat_answers import chat_answers
from ..opening import load_run
from .common import in_precision, progress_wanted


@in_precision
def make_chat_data(args: argparse.Namespace) -> int:
    """``scratchformer make-chat-data --out DIR [--per-source N] [--val N] [--seed S]
    [--system TEXT] [--source NAME ...] [--rejected-from RUN]``: the conversations and
    preference pairs; a line a file written, with its count by dataset."""
    chat = chat_set(args.per_source, args.val, args.seed, args.source or SOURCES)
    if args.rejected_from is not None:
        chat = ChatSet(chat.train, chat.val, *_own_mistakes(args, (chat.train, chat.val)))
    paths = write_chat_set(args.out, chat, args.system)
    for part, generated in chat.parts().items():
        path = paths[part]
        what = "pairs" if part.startswith("pairs") else "conversations"
        sources = Counter(g.instruction.source for g in generated)
        by_source = ", ".join(
            f"{source} {sources[source]}" for source in SOURCES if source in sources
        )
        print(f"{path}: {len(generated)} {what} ({by_source})")
    return 0


def _own_mistakes(
    args: argparse.Namespace, parts: Sequence[Sequence[Generated]]
) -> list[tuple[Generated, ...]]:
    """For each part, the instructions ``args.rejected_from`` answers wrongly, its answers
    rejected."""
    task, model = load_run(Path(args.rejected_from))
    if not task.decodes:
        raise UsageError(
            f"--rejected-from {args.rejected_from} is a {task.name!r} run: "
            "its answers need a language model"
        )
    model = model.to(default_device(args.device))
    template = task.chat_template or DEFAULT_TEMPLATE
    found = []
    for generated in parts:
        answers = chat_answers(
            model,
            task.tokenizer(),
            template,
            chats(generated, args.system),
            [ANSWER_TOKENS[g.instruction.kind] for g in generated],
            shown=progress_wanted(args),
        )
        found.append(own_mistakes(generated, answers))
    return found
