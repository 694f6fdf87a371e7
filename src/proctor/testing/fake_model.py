"""Serve the fake model: `python -m proctor.testing.fake_model [--host H] [--port P]`.

Answers with the default policy (an echo of the last message, with realistic usage)
and keeps no request log, so it can serve a benchmark for as long as it runs. Prints
one JSON line `{"url": ..., "origin": ...}` on stdout once bound (`url` is the OpenAI
base URL, `origin` the Anthropic one) and serves until SIGTERM or SIGINT, on uvloop
when it is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Callable

from ._fake_model import FakeModelServer

__all__ = ["main"]


async def _serve(host: str, port: int) -> None:
    """Serve the default policy on `host:port` until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with FakeModelServer(host=host, port=port, record=False) as fake:
        sys.stdout.write(json.dumps({"url": fake.url, "origin": fake.origin}) + "\n")
        sys.stdout.flush()
        await stop.wait()


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m proctor.testing.fake_model`."""
    parser = argparse.ArgumentParser(prog="python -m proctor.testing.fake_model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(_serve(args.host, args.port))
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
