"""The proxy side of `bench/proxy.py`: an `InterceptionProxy` in its own process.

`python bench/_proxy_server.py --upstream URL --sessions N [--uvloop] [--budgets]` opens
N rollout sessions, prints `{"url": ..., "secrets": [...]}` as one JSON line, and serves
until SIGTERM or its stdin closes. Each session records into its own trace, as a
rollout's would; with `--budgets` each has token and cost budgets too large to reach, so
every turn is metered (with the proctor that has them, each turn in flight holds its
worst case).

A line `next` on stdin ends every session and opens N new ones, whose secrets it prints
as another JSON line: a batch that ends hands its traces on and the next batch starts
with none, so a bench of many runs does not measure a proxy holding every turn of
every earlier run (the cycle collector's passes over them grow with that).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys

from proctor.proxy import InterceptionProxy, ModelLimits, ProxySession
from proctor.records import Trace


async def serve(upstream: str, sessions: int, budgets: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    limits = ModelLimits(max_total_tokens=10**12, max_cost=1e9) if budgets else None
    async with InterceptionProxy(upstream, limits=limits) as proxy:
        batch = 0

        def open_batch() -> list[ProxySession]:
            made = range(batch * sessions, (batch + 1) * sessions)
            opened = [proxy.open_session(f"r{i}", trace=Trace(f"t{i}")) for i in made]
            line = {"url": proxy.base_url, "secrets": [s.secret for s in opened]}
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()
            return opened

        opened = open_batch()
        commands = asyncio.StreamReader()
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(commands), os.fdopen(0, "rb", 0)
        )
        waiter = asyncio.ensure_future(stop.wait())
        while True:
            line = asyncio.ensure_future(commands.readline())
            await asyncio.wait([waiter, line], return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set() or not line.result().strip():  # a signal, or stdin closed
                line.cancel()
                break
            for session in opened:
                session.close()
            batch += 1
            opened = open_batch()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--uvloop", action="store_true")
    parser.add_argument("--budgets", action="store_true")
    args = parser.parse_args()
    factory = None
    if args.uvloop:
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(args.upstream, args.sessions, args.budgets))


if __name__ == "__main__":
    main()
