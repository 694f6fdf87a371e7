"""`proctor serve`: the same server as `python -m proctor.serve`."""

from __future__ import annotations

import argparse

from ._common import split_source

__all__ = ["cmd_serve"]


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT; `run_server` reports its own errors in one line."""
    from ..serve import run_server

    source, env_name = split_source(args.source, args.env)
    return run_server(
        source,
        env_name,
        args.host,
        args.port,
        args.token_env,
        args.park_ttl,
        args.json,
        unix=args.unix,
        legacy_resume=args.legacy_resume,
        compat=args.compat,
    )
