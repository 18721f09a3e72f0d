"""``scratchformer serve RUN``: the run's model behind an HTTP API (:mod:`scratchformer.serve`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvicorn

from ..serve import ServeOptions, create_app


def serve(args: argparse.Namespace) -> int:
    """Load the run once, then answer requests until SIGTERM or Ctrl-C; the requests in
    flight are finished first (for at most ``--timeout`` seconds)."""
    options = ServeOptions(
        quantize=args.quantize,
        compile=args.compile,
        precision=args.precision,
        device=args.device,
        api_key=args.api_key,
        max_batch=args.max_batch,
        max_queue=args.max_queue,
        timeout_s=args.timeout,
        context=args.context,
    )
    if args.compile and not args.quiet:
        print("compiling the decoding step: a minute or two before serving", file=sys.stderr)
    app = create_app(Path(args.run), options)
    if not args.quiet:
        print(f"serving {args.run} on http://{args.host}:{args.port}", file=sys.stderr)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level="warning" if args.quiet else "info",
        timeout_graceful_shutdown=int(args.timeout),
    )
    return 0
