"""The proxy side of `bench/proxy.py`: an `InterceptionProxy` in its own process.

`python bench/_proxy_server.py --upstream URL --sessions N [--uvloop]` opens N rollout
sessions, prints `{"url": ..., "secrets": [...]}` as one JSON line, and serves until
SIGTERM. Each session records into its own trace, as a rollout's would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from proctor.proxy import InterceptionProxy
from proctor.records import Trace


async def serve(upstream: str, sessions: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with InterceptionProxy(upstream) as proxy:
        opened = [proxy.open_session(f"r{i}", trace=Trace(f"t{i}")) for i in range(sessions)]
        line = {"url": proxy.base_url, "secrets": [s.secret for s in opened]}
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--uvloop", action="store_true")
    args = parser.parse_args()
    factory = None
    if args.uvloop:
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(args.upstream, args.sessions))


if __name__ == "__main__":
    main()
