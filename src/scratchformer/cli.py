"""The ``scratchformer`` command.

User errors (bad arguments, bad files, bad configs) are reported as one line on stderr
with exit status 2 and no traceback; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scratchformer",
        description="Train, run and look inside Transformers written from scratch.",
    )
    parser.add_argument("--version", action="version", version=f"scratchformer {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 0
    try:
        return int(args.run(args) or 0)
    except (ValueError, OSError) as error:
        if args.debug:
            raise
        print(f"scratchformer: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
