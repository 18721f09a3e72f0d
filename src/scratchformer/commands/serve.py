"""``scratchformer serve RUN``: the run's model behind an HTTP API (:mod:`scratchformer.serve`)."""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

import uvicorn

from ..serve import ServeOptions, create_app


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``, taken before the run loads: an address that cannot
    be had is the one-line error naming it, not the server's log and exit later."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
    except (OSError, UnicodeError) as error:
        listener.close()
        reason = getattr(error, "strerror", None) or error
        raise ValueError(f"cannot listen on --host {host!r} --port {port}: {reason}") from None
    return listener


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
        prefix_cache=args.prefix_cache,
        verbose=not args.quiet,
    )
    listener = listening_socket(args.host, args.port)
    with listener:
        app = create_app(Path(args.run), options)
        if not args.quiet:
            port = listener.getsockname()[1]
            print(f"serving {args.run} on http://{args.host}:{port}", file=sys.stderr)
        config = uvicorn.Config(
            app,
            log_level="warning" if args.quiet else "info",
            timeout_graceful_shutdown=int(args.timeout),
        )
        uvicorn.Server(config).run(sockets=[listener])
    return 0
