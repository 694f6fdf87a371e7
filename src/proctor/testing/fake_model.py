"""Serve the fake model: `python -m proctor.testing.fake_model [--host H] [--port P]`.

A local stand-in for a model provider, for offline runs and benchmarks: OpenAI Chat
Completions, OpenAI Responses and Anthropic Messages (streaming or not) on one port,
answering with the default policy (an echo of the last message, with realistic usage).
It keeps no request log, so it can serve a benchmark for as long as it runs. Prints one
JSON line `{"url": ..., "origin": ..., "model": ...}` on stdout once bound: `url` is the
OpenAI base URL, `origin` the Anthropic one, and `model` a model string for proctor
(`fake/fake-model@URL`). Serves until SIGTERM or SIGINT, on uvloop when it is installed.
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


_DESCRIPTION = """\
A fake model provider for offline runs: OpenAI Chat Completions and Responses
(/v1/chat/completions, /v1/responses) and Anthropic Messages (/v1/messages), streaming
or not, answering "echo: " and the last message. Once bound it prints one JSON line:
  {"url": "http://127.0.0.1:PORT/v1", "origin": "http://127.0.0.1:PORT",
   "model": "fake/fake-model@http://127.0.0.1:PORT/v1"}
Use the "model" string wherever proctor takes a model (proctor run --model, a batch
config's "model"); any NAME/MODEL@URL works, and `fake/` sends no API key, where a
known provider such as `openai/<any>@URL` would send $OPENAI_API_KEY. Anthropic
clients take "origin" as their base URL. Serves until SIGTERM or SIGINT (Ctrl-C).
"""


async def _serve(host: str, port: int) -> None:
    """Serve the default policy on `host:port` until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with FakeModelServer(host=host, port=port, record=False) as fake:
        info = {"url": fake.url, "origin": fake.origin, "model": f"fake/fake-model@{fake.url}"}
        sys.stdout.write(json.dumps(info) + "\n")
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
    parser = argparse.ArgumentParser(
        prog="python -m proctor.testing.fake_model",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default: any free one)")
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
