"""``scratchformer make-chat-data``: instructions from the named datasets, for ``sft`` and
``dpo``."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence

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
from ..inference.chat_answers import chat_answers
from .common import in_precision, progress_wanted


@in_precision
def make_chat_data(args: argparse.Namespace) -> int:
    """``scratchformer make-chat-data --out DIR [--per-source N] [--val N] [--seed S]
    [--system TEXT] [--source NAME ...] [--rejected-from RUN]``: the conversations and
    preference pairs; a line a file written, with its count by dataset."""
    chat = chat_set(args.per_source, args.val, args.seed, args.source or SOURCES)
    if args.rejected_from is not None:
        mistakes = [_own_mistakes(args, part) for part in (chat.train, chat.val)]
        chat = ChatSet(chat.train, chat.val, *mistakes)
    paths = write_chat_set(args.out, chat, args.system)
    for part, path in paths.items():
        generated = chat.part(part)
        what = "pairs" if part.startswith("pairs") else "conversations"
        sources = Counter(g.instruction.source for g in generated)
        by_source = ", ".join(
            f"{source} {sources[source]}" for source in SOURCES if source in sources
        )
        print(f"{path}: {len(generated)} {what} ({by_source})")
    return 0


def _own_mistakes(
    args: argparse.Namespace, generated: Sequence[Generated]
) -> tuple[Generated, ...]:
    """The instructions ``args.rejected_from`` answers wrongly, its answers rejected."""
    answers = chat_answers(
        args.rejected_from,
        chats(generated, args.system),
        [ANSWER_TOKENS[g.instruction.kind] for g in generated],
        default_device(args.device),
        shown=progress_wanted(args),
    )
    return own_mistakes(generated, answers)
