"""Serve an environment on one TCP port: `python -m proctor.serve SOURCE [--env NAME]`.

Runs the initialize hooks, binds, prints exactly `PROCTOR_SERVE_PORT=<port>` on stdout
(flushed), serves until SIGTERM or SIGINT, then cancels every task, runs the shutdown
hooks and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable

from ._errors import ProctorError
from .channel._server import DEFAULT_PARK_TTL, Server
from .env._environment import Environment

__all__ = ["main", "serve"]

PORT_PREFIX = "PROCTOR_SERVE_PORT="


def _announce(port: int) -> None:
    sys.stdout.write(f"{PORT_PREFIX}{port}\n")
    sys.stdout.flush()


async def serve(
    env: Environment,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    park_ttl: float = DEFAULT_PARK_TTL,
    announce: Callable[[int], None] = _announce,
) -> None:
    """Start `env`, bind, announce the port, and serve until SIGTERM/SIGINT.

    Raises:
        OSError: the address cannot be bound (after the shutdown hooks ran).
        ValueError: a non-loopback host without a token.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await env.start()
    server = Server(env, token=token, park_ttl=park_ttl)
    try:
        _, bound = await server.listen(host, port)
        announce(bound)
        await stop.wait()
    finally:
        try:
            await server.aclose()
        finally:
            await env.stop()


def _announce_json(host: str, env: Environment) -> Callable[[int], None]:
    def announce(port: int) -> None:
        _announce(port)
        info = {"url": f"tcp://{host}:{port}", "host": host, "port": port, "env": env.name,
                "version": env.version}  # fmt: skip
        sys.stdout.write(json.dumps(info) + "\n")
        sys.stdout.flush()

    return announce


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m proctor.serve`."""
    parser = argparse.ArgumentParser(prog="python -m proctor.serve")
    parser.add_argument("source", help="Python file or folder defining an Environment")
    parser.add_argument("--env", dest="env_name", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--token-env",
        default=None,
        help="name of the environment variable holding the shared token",
    )
    parser.add_argument("--park-ttl", type=float, default=DEFAULT_PARK_TTL)
    args = parser.parse_args(argv)
    return run_server(
        args.source, args.env_name, args.host, args.port, args.token_env, args.park_ttl
    )


def run_server(
    source: str,
    env_name: str | None,
    host: str,
    port: int,
    token_env: str | None,
    park_ttl: float = DEFAULT_PARK_TTL,
    json_out: bool = False,
) -> int:
    """Load and serve a source; print one clear line and return 1 on a user error.

    With `json_out`, a JSON line `{url, host, port, env, version}` follows the port line.
    """
    from ._loader import find_environment

    token = None
    if token_env:
        token = os.environ.get(token_env)
        if not token:
            print(f"error: environment variable {token_env} is empty or unset", file=sys.stderr)
            return 1
    try:
        env = find_environment(source, env_name)
        announce = _announce_json(host, env) if json_out else _announce
        asyncio.run(
            serve(env, host=host, port=port, token=token, park_ttl=park_ttl, announce=announce)
        )
    except ProctorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
