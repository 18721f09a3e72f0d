"""``scratchformer export-gguf`` and ``export-onnx``: a run for llama.cpp or ONNX Runtime."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..run import export_gguf, export_onnx


def export_gguf_file(args: argparse.Namespace) -> int:
    """``scratchformer export-gguf RUN --out FILE.gguf [--type TYPE]``: one GGUF file of the
    run's model and tokenizer; a line naming the file, its size and type at the end."""
    out = Path(args.out)
    arch = export_gguf(Path(args.run), out, args.type)
    size = out.stat().st_size
    print(f"{out}: {size / 2**20:.2f} MiB ({size:,} bytes), {args.type}, llama.cpp {arch}")
    return 0


def export_onnx_graph(args: argparse.Namespace) -> int:
    """``scratchformer export-onnx RUN --out DIR``: an encoder run as an ONNX graph, with
    its tokenizer and a config.json; a line naming the directory and the graph's size."""
    out = Path(args.out)
    export_onnx(Path(args.run), out)
    size = (out / "model.onnx").stat().st_size
    print(f"{out}: model.onnx {size / 2**20:.2f} MiB ({size:,} bytes), tokenizer.json, config.json")
    return 0
