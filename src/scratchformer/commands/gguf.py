"""``scratchformer export-gguf``: a language model run for llama.cpp."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..run import export_gguf


def export_model(args: argparse.Namespace) -> int:
    """``scratchformer export-gguf RUN --out FILE.gguf [--type TYPE]``: one GGUF file of the
    run's model and tokenizer; a line naming the file, its size and type at the end."""
    out = Path(args.out)
    arch = export_gguf(Path(args.run), out, args.type)
    size = out.stat().st_size
    print(f"{out}: {size / 2**20:.2f} MiB ({size:,} bytes), {args.type}, llama.cpp {arch}")
    return 0
