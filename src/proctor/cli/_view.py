"""`proctor view OUT [OUT ...]`: the dashboard over batch output directories."""

from __future__ import annotations

import argparse
import sys

from ._common import CLIError, read_token, run_async

__all__ = ["cmd_view"]


def cmd_view(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT after printing `PROCTOR_VIEW_URL=<url>` on stdout."""
    from ..view import ViewServer, serve_view

    token = read_token(args.token_env)
    try:
        server = ViewServer(args.paths, host=args.host, port=args.port, token=token)
    except (ValueError, FileNotFoundError) as exc:
        raise CLIError(str(exc)) from None
    if not server.batches:
        raise CLIError(f"no batch output directories (with batch.json) in {' '.join(args.paths)}")

    def ready(url: str) -> None:
        sys.stdout.write(f"PROCTOR_VIEW_URL={url}\n")
        sys.stdout.flush()
        if args.open:
            import webbrowser

            webbrowser.open(url)  # never with the token: it would sit in the browser's argv

    run_async(serve_view(server, ready))
    return 0
