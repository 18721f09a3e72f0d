"""``scratchformer make-chat-data``: instructions from the named datasets, for ``sft`` and
``dpo``."""

from __future__ import annotations

import argparse
from collections import Counter

from ..data.instructions import SOURCES, chat_set, write_chat_set


def make_chat_data(args: argparse.Namespace) -> int:
    """``scratchformer make-chat-data --out DIR [--per-source N] [--val N] [--seed S]
    [--system TEXT] [--source NAME ...]``: the conversations and preference pairs; a line
    a file written, with its count by dataset."""
    chat = chat_set(args.per_source, args.val, args.seed, args.source or SOURCES)
    paths = write_chat_set(args.out, chat, args.system)
    for part, path in paths.items():
        generated = chat.val if part.endswith("val") else chat.train
        what = "pairs" if part.startswith("pairs") else "conversations"
        sources = Counter(g.instruction.source for g in generated)
        by_source = ", ".join(
            f"{source} {sources[source]}" for source in SOURCES if source in sources
        )
        print(f"{path}: {len(generated)} {what} ({by_source})")
    return 0
