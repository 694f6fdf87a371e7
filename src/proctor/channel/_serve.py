"""Serve an environment: `python -m proctor.serve SOURCE [--env NAME] [--unix PATH]`.

Runs the initialize hooks, binds, prints exactly `PROCTOR_SERVE_PORT=<port>` on stdout
(flushed), serves until SIGTERM or SIGINT, then cancels every task, runs the shutdown
hooks and exits. With `--unix PATH` it listens on that Unix socket instead of a TCP port
and prints `PROCTOR_SERVE_UNIX=<path>`; the socket file is removed on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import Callable

from .._errors import TeardownError
from .._usererror import debugging, print_error, user_message
from ..env import Environment
from ._server import DEFAULT_PARK_TTL, EnvServer

__all__ = ["main", "run_server", "serve"]

PORT_PREFIX = "PROCTOR_SERVE_PORT="
UNIX_PREFIX = "PROCTOR_SERVE_UNIX="
# On stderr when a shutdown hook failed: `PROCTOR_TEARDOWN_ERROR=<pid> <type>: <message>`,
# so the runtime that stopped this process can record it on the rollout.
TEARDOWN_PREFIX = "PROCTOR_TEARDOWN_ERROR="
SHUTDOWN_FAILED = "environment shutdown failed: "  # a TeardownError's message starts so


def _announce(port: int) -> None:
    sys.stdout.write(f"{PORT_PREFIX}{port}\n")
    sys.stdout.flush()


def _announce_unix(path: str) -> None:
    sys.stdout.write(f"{UNIX_PREFIX}{path}\n")
    sys.stdout.flush()


async def serve(
    env: Environment,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    unix: str | socket.socket | None = None,
    token: str | None = None,
    park_ttl: float = DEFAULT_PARK_TTL,
    legacy_resume: bool = False,
    announce: Callable[[int], None] = _announce,
    announce_unix: Callable[[str], None] = _announce_unix,
) -> None:
    """Start `env`, bind, announce the address, and serve until SIGTERM/SIGINT.

    With `unix` (a path, or a listening Unix socket to adopt) the server listens there
    instead of on `host:port`, and `announce_unix` gets the path.

    Raises:
        OSError: the address cannot be bound (after the shutdown hooks ran).
        ValueError: a non-loopback host without a token.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await env.start()
    server = EnvServer(env, token=token, park_ttl=park_ttl, legacy_resume=legacy_resume)
    try:
        if isinstance(unix, str):
            announce_unix(await server.listen_unix(unix))
        elif unix is not None:
            announce_unix(await server.listen_unix(sock=unix))
        else:
            _, bound = await server.listen(host, port)
            announce(bound)
            if token is None and env.capabilities:
                _warn_open(env)
        await stop.wait()
    finally:
        try:
            await server.aclose()
        finally:
            try:
                await env.stop()
            except Exception as exc:
                why = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:2000]
                sys.stderr.write(f"{TEARDOWN_PREFIX}{os.getpid()} {why}\n")
                sys.stderr.flush()
                raise TeardownError(SHUTDOWN_FAILED + why) from exc


def _announce_json(host: str, env: Environment) -> Callable[[int], None]:
    def announce(port: int) -> None:
        _announce(port)
        info = {"url": f"tcp://{host}:{port}", "host": host, "port": port, "env": env.name,
                "version": env.version}  # fmt: skip
        sys.stdout.write(json.dumps(info) + "\n")
        sys.stdout.flush()

    return announce


def _announce_unix_json(env: Environment) -> Callable[[str], None]:
    def announce(path: str) -> None:
        _announce_unix(path)
        info = {"url": f"unix://{path}", "path": path, "env": env.name, "version": env.version}
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
        "--unix", default=None, metavar="PATH", help="listen on this Unix socket instead"
    )
    parser.add_argument(
        "--token-env",
        default=None,
        help="name of the environment variable holding the shared token (removed once read)",
    )
    parser.add_argument("--park-ttl", type=float, default=DEFAULT_PARK_TTL)
    parser.add_argument(
        "--legacy-resume",
        action="store_true",
        help="HUD's resume rules: no resume_token needed, a bare grade adopts the parked task",
    )
    parser.add_argument(
        "--compat",
        choices=["hud"],
        default=None,
        help="serve a source written against HUD (`from hud import Environment`)",
    )
    args = parser.parse_args(argv)
    return run_server(
        args.source,
        args.env_name,
        args.host,
        args.port,
        args.token_env,
        args.park_ttl,
        unix=args.unix,
        legacy_resume=args.legacy_resume,
        compat=args.compat,
    )


def _warn_open(env: Environment) -> None:
    names = ", ".join(c.name for c in env.capabilities)
    sys.stderr.write(
        f"warning: serving without a token: any local user can connect and use {names} "
        "through tunnel.open (pass --token-env VAR to require a token)\n"
    )
    sys.stderr.flush()


def run_server(
    source: str,
    env_name: str | None,
    host: str,
    port: int,
    token_env: str | None,
    park_ttl: float = DEFAULT_PARK_TTL,
    json_out: bool = False,
    unix: str | None = None,
    legacy_resume: bool = False,
    compat: str | None = None,
) -> int:
    """Load and serve a source; print one clear line and return 1 on a user error.

    With `json_out`, a JSON line `{url, host, port, env, version}` follows the port line
    (`{url, path, env, version}` after the Unix socket line when serving on `unix`).
    With `compat="hud"` the source may be written against HUD (`proctor.compat`).
    """
    from .._loader import find_environment

    token = None
    if token_env:
        # Removed once read: nothing the environment starts (its shell's commands) sees it.
        token = os.environ.pop(token_env, None)
        if not token:
            print_error(f"environment variable {token_env} is empty or unset")
            return 1
    try:
        env = find_environment(source, env_name, compat=compat)
        asyncio.run(
            serve(
                env,
                host=host,
                port=port,
                unix=unix,
                token=token,
                park_ttl=park_ttl,
                legacy_resume=legacy_resume,
                announce=_announce_json(host, env) if json_out else _announce,
                announce_unix=_announce_unix_json(env) if json_out else _announce_unix,
            )
        )
    except Exception as exc:
        where = f"unix://{unix}" if unix else f"{host}:{port}"
        message = user_message(exc, os_context=f"cannot listen on {where}")
        if message is None or debugging():
            raise
        print_error(message)
        return 1
    return 0
